package outboxsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

var _ outbox.OutgoingReader = (*InboxTable)(nil)

// Outgoing returns the outbox table and the ids of the messages the
// handling of message id by consumer wrote and that the purge has not yet
// seen published (see outbox.OutgoingReader).
func (t *InboxTable) Outgoing(ctx context.Context, consumer string, id uuid.UUID) (table string, ids []uuid.UUID, err error) {
	var outgoing sql.NullString
	err = t.store.DB().QueryRowContext(ctx, `SELECT outgoing FROM `+t.quoted()+` WHERE consumer = ?1 AND message_id = ?2`, consumer, id.String()).Scan(&outgoing)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !outgoing.Valid {
		return "", nil, nil
	}
	if err == nil {
		err = json.Unmarshal([]byte(outgoing.String), &ids)
	}
	if err != nil {
		return "", nil, fmt.Errorf("outboxsqlite: read the outgoing messages of %s in inbox %s: %w", id, t.name, err)
	}
	return t.store.Name(), ids, nil
}
