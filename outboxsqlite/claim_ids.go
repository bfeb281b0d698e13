package outboxsqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

var _ outboxdriver.IDClaimer = (*Store)(nil)

// ClaimIDs leases those of ids that are pending, due and not leased (see
// outboxdriver.IDClaimer), under the write lock: the rows read are the rows
// leased. A row that cannot be decoded is left to the relay's claims, which
// dead-letter it.
func (s *Store) ClaimIDs(ctx context.Context, ids []uuid.UUID, claim outboxdriver.Claim) ([]outboxdriver.Message, error) {
	if len(ids) == 0 || s.set.orderByKey {
		return nil, nil
	}
	if claim.Lease <= 0 {
		return nil, fmt.Errorf("outboxsqlite: claim %d messages by id on %s: lease %v must be positive", len(ids), s.Name(), claim.Lease)
	}
	var msgs []outboxdriver.Message
	err := s.writeTx(ctx, func(ctx context.Context, c *sql.Conn, now int64) error {
		rows, err := c.QueryContext(ctx, `SELECT `+messageColumns+` FROM `+s.set.qTable+`
WHERE id IN (SELECT value FROM json_each(?2)) AND status = 'pending' AND available_at <= ?1
	AND (locked_until IS NULL OR locked_until <= ?1)
ORDER BY id`, now, idsJSON(ids))
		if err != nil {
			return err
		}
		var undecodable []outboxdriver.Failure
		if msgs, undecodable, err = collectMessages(rows); err != nil {
			return err
		}
		msgs = slices.DeleteFunc(msgs, func(m outboxdriver.Message) bool {
			return slices.ContainsFunc(undecodable, func(f outboxdriver.Failure) bool { return f.ID == m.ID })
		})
		if len(msgs) == 0 {
			return nil
		}
		claimed := make([]uuid.UUID, len(msgs))
		for i := range msgs {
			claimed[i] = msgs[i].ID
		}
		_, err = c.ExecContext(ctx, `UPDATE `+s.set.qTable+` SET locked_until = ?1, lease_token = ?2
WHERE status = 'pending' AND id IN (SELECT value FROM json_each(?3))`, now+micros(claim.Lease), claim.Token.String(), idsJSON(claimed))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("outboxsqlite: claim %d messages by id on %s: %w", len(ids), s.Name(), explain(err, s.path))
	}
	return msgs, nil
}
