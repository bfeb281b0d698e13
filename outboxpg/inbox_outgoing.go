package outboxpg

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox"
)

var _ outbox.OutgoingReader = (*InboxTable)(nil)

// Outgoing returns the outbox table and the ids of the messages the
// handling of message id by consumer wrote and that the purge has not yet
// seen published (see outbox.OutgoingReader).
func (t *InboxTable) Outgoing(ctx context.Context, consumer string, id uuid.UUID) (table string, ids []uuid.UUID, err error) {
	var outboxTable *string
	var outgoing []pgtype.UUID
	err = t.pool.QueryRow(ctx, `SELECT outbox_table, outgoing FROM `+t.q+` WHERE consumer = $1 AND message_id = $2`, consumer, pgUUID(id)).
		Scan(&outboxTable, &outgoing)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, fmt.Errorf("outboxpg: read the outgoing messages of %s in inbox %s: %w", id, t.name, err)
	}
	if outboxTable == nil {
		return "", nil, nil
	}
	for _, o := range outgoing {
		ids = append(ids, o.Bytes)
	}
	return *outboxTable, ids, nil
}
