package outbox

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// DeadDiscarder is the part of a store's Admin (outboxdriver.Admin) that
// DiscardDeadBlobs needs.
type DeadDiscarder interface {
	DiscardDead(ctx context.Context, ids ...uuid.UUID) (int, error)
}

// DiscardDeadBlobs discards the dead messages ids, as admin.DiscardDead
// does, and deletes the blob of each message it discarded (cfg.Key(id)),
// for an outbox whose relay publishes through ClaimCheck with cfg. It
// returns how many messages it discarded.
//
// A dead message was not confirmed by its broker, but a blob may exist for
// it: its payload is put before every attempt to publish it. Once the
// message is gone nothing puts it again, and the blob would wait for
// retention. Messages go one at a time, so that a blob is deleted only for
// a message this call deleted: an id that is not dead (pending again after
// a retry, or being published) keeps its blob, which its next publish
// needs. Deleting a blob that was never put is no error. A blob whose
// Delete fails stays for retention; the error says which, after the
// messages were discarded. A consumer that received the message anyway (a
// confirmation lost before it died) finds no blob: ResolveClaimChecks fails
// it with ErrBlobNotFound and its adapter parks it after MaxDeliver.
func DiscardDeadBlobs(ctx context.Context, admin DeadDiscarder, blobs BlobStore, cfg ClaimCheckConfig, ids ...uuid.UUID) (int, error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	discarded := 0
	var failed []string
	var firstErr error
	for _, id := range ids {
		n, err := admin.DiscardDead(ctx, id)
		if err != nil {
			return discarded, err
		}
		if n == 0 {
			continue
		}
		discarded += n
		if err := blobs.Delete(ctx, cfg.Key(id)); err != nil {
			failed = append(failed, id.String())
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	if firstErr != nil {
		return discarded, fmt.Errorf("outbox: %d message(s) discarded, but the blobs of %d of them stay until retention deletes them (%v): %w", discarded, len(failed), failed, firstErr)
	}
	return discarded, nil
}
