package outboxpg

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.IDClaimer = (*Store)(nil)

// claimIDsStatement leases the given ids ($3) that are pending, due and not
// leased, skipping rows another transaction holds.
func claimIDsStatement(qTable string) string {
	return `
WITH c AS MATERIALIZED (
	SELECT ctid FROM ` + qTable + `
	WHERE id = ANY($3::uuid[]) AND status = 'pending' AND available_at <= now()
		AND (locked_until IS NULL OR locked_until <= now())
	FOR UPDATE SKIP LOCKED
)
UPDATE ` + qTable + ` AS t
SET locked_until = now() + $1::bigint * interval '1 microsecond', lease_token = $2
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM c))
RETURNING ` + messageColumns
}

// ClaimIDs leases those of ids that are pending, due and not leased (see
// outboxdriver.IDClaimer). A row that cannot be decoded is left to the
// relay's claims, which dead-letter it.
func (s *Store) ClaimIDs(ctx context.Context, ids []uuid.UUID, claim outboxdriver.Claim) ([]outboxdriver.Message, error) {
	if len(ids) == 0 || s.opts.OrderByKey {
		return nil, nil
	}
	if claim.Lease <= 0 {
		return nil, fmt.Errorf("outboxpg: claim %d messages by id on %s: lease %v must be positive", len(ids), s.Name(), claim.Lease)
	}
	rows, err := s.pool.Query(ctx, claimIDsStatement(s.names.qTable), micros(claim.Lease), pgUUID(claim.Token), pgUUIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("outboxpg: claim %d messages by id on %s: %w", len(ids), s.Name(), err)
	}
	msgs, undecodable, err := collectMessages(rows)
	if err != nil {
		return nil, fmt.Errorf("outboxpg: claim %d messages by id on %s: %w", len(ids), s.Name(), err)
	}
	msgs = withoutFailures(msgs, undecodable)
	slices.SortFunc(msgs, func(a, b outboxdriver.Message) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	return msgs, nil
}
