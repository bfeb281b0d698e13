package outboxdriver

import (
	"context"

	"github.com/google/uuid"
)

// IDClaimer is implemented by stores that can lease given messages rather
// than the next due ones: Relay.PublishNow publishes the messages of one
// transaction right after its commit with it.
type IDClaimer interface {
	// ClaimIDs leases to claim.Token, for claim.Lease, those of ids that
	// are pending, due and not leased, and returns them in id order
	// (claim.Limit is not used). In key order (a store's OrderByKey option)
	// it claims nothing: the relay, woken by the commit, keeps each key's
	// order.
	ClaimIDs(ctx context.Context, ids []uuid.UUID, claim Claim) ([]Message, error)
}
