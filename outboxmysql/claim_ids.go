package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.IDClaimer = (*Store)(nil)

// ClaimIDs leases those of ids that are pending, due and not leased (see
// outboxdriver.IDClaimer), in one READ COMMITTED transaction: a locking
// read by primary key that passes over rows another claim holds (SKIP
// LOCKED), then the lease of the rows it read. A row that cannot be decoded
// is left to the relay's claims, which dead-letter it. In key order it
// claims nothing.
func (s *Store) ClaimIDs(ctx context.Context, ids []uuid.UUID, claim outboxdriver.Claim) ([]outboxdriver.Message, error) {
	if len(ids) == 0 || s.set.orderByKey {
		return nil, nil
	}
	if claim.Lease <= 0 {
		return nil, fmt.Errorf("outboxmysql: claim %d messages by id on %s: lease %v must be positive", len(ids), s.Name(), claim.Lease)
	}
	var msgs []outboxdriver.Message
	err := s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		msgs = nil
		rows, err := tx.QueryContext(ctx, `SELECT `+messageColumns+` FROM `+s.set.byID()+`
WHERE id IN (`+placeholders(len(ids))+`) AND status = 'pending' AND available_at <= UTC_TIMESTAMP(6)
	AND (locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6))
ORDER BY id
FOR UPDATE SKIP LOCKED`, idArgs(ids)...)
		if err != nil {
			return err
		}
		var undecodable []outboxdriver.Failure
		if msgs, undecodable, err = collectMessages(rows, len(ids)); err != nil {
			return err
		}
		msgs = dropFailed(msgs, undecodable)
		if len(msgs) == 0 {
			return nil
		}
		claimed := make([]uuid.UUID, len(msgs))
		for i := range msgs {
			claimed[i] = msgs[i].ID
		}
		_, err = tx.ExecContext(ctx, idList(s.stmts.claimUpdate, len(claimed)), append([]any{micros(claim.Lease), claim.Token[:]}, idArgs(claimed)...)...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxmysql: claim %d messages by id on %s: %w", len(ids), s.Name(), err)
	}
	return msgs, nil
}
