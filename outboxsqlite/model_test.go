package outboxsqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/storetest"
)

// TestModelOfTheStoreContract runs storetest.RunModel, unordered and in
// key order, with an operator's UPDATEs and VACUUM of the file.
func TestModelOfTheStoreContract(t *testing.T) {
	t.Parallel()
	storetest.RunModel(t, func(t *testing.T) storetest.ModelHarness {
		store := newStore(t, outboxsqlite.Options{Table: randomTable()})
		db, q := store.DB(), store.Name()
		exec := func(ctx context.Context, query string, args ...any) error {
			_, err := db.ExecContext(ctx, query, args...)
			return err
		}
		return storetest.ModelHarness{
			Harness: harness(t, store),
			Reschedule: func(ctx context.Context, ids []uuid.UUID, at time.Time) error {
				return exec(ctx, `UPDATE `+q+` SET available_at = ? WHERE id IN (SELECT value FROM json_each(?))`, at.UnixMicro(), idList(ids))
			},
			Rows: func(ctx context.Context) ([]outboxdriver.Message, error) { return modelRows(ctx, db, q) },
			SetPayload: func(ctx context.Context, id uuid.UUID, payload []byte) error {
				return exec(ctx, `UPDATE `+q+` SET payload = ? WHERE id = ?`, payload, id.String())
			},
			Touch: func(ctx context.Context, ids []uuid.UUID) error {
				return exec(ctx, `UPDATE `+q+` SET available_at = available_at WHERE id IN (SELECT value FROM json_each(?))`, idList(ids))
			},
			// VACUUM rebuilds the whole file; rows of a table without an
			// INTEGER PRIMARY KEY may get new rowids.
			Vacuum: func(ctx context.Context, _ bool) error { return exec(ctx, `VACUUM`) },
		}
	})
}

func idList(ids []uuid.UUID) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// modelRows reads every row of the table q.
func modelRows(ctx context.Context, db *sql.DB, q string) ([]outboxdriver.Message, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at FROM `+q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outboxdriver.Message
	for rows.Next() {
		var (
			m                  outboxdriver.Message
			id                 string
			headers, lastError sql.NullString
			created, available int64
			published          sql.NullInt64
		)
		if err := rows.Scan(&id, &m.Topic, &m.Key, &m.Payload, &headers, &created, &available, &m.Attempts, &lastError, &m.Status, &published); err != nil {
			return nil, err
		}
		if m.ID, err = uuid.Parse(id); err != nil {
			return nil, err
		}
		if headers.Valid && headers.String != "" {
			if err := json.Unmarshal([]byte(headers.String), &m.Headers); err != nil {
				return nil, err
			}
		}
		m.CreatedAt, m.AvailableAt = time.UnixMicro(created).UTC(), time.UnixMicro(available).UTC()
		m.LastError = lastError.String
		if published.Valid {
			m.PublishedAt = time.UnixMicro(published.Int64).UTC()
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
