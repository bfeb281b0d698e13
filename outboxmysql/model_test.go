package outboxmysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/storetest"
)

// TestModelOfTheStoreContract runs storetest.RunModel, unordered and in
// key order (holding keys behind dead messages and skipping them), with an
// operator's UPDATEs, ANALYZE and OPTIMIZE of the table, and the server
// ending the store's sessions, as a restart would.
func TestModelOfTheStoreContract(t *testing.T) {
	t.Parallel()
	storetest.RunModel(t, func(t *testing.T) storetest.ModelHarness {
		db := mysqltest.DB(t)
		return modelHarness(t, db, migrated(t, db, outboxmysql.Options{Table: randomTable()}))
	})
}

// modelHarness is the model's harness for store, on db.
func modelHarness(t *testing.T, db *sql.DB, store *outboxmysql.Store) storetest.ModelHarness {
	q := "`" + store.Name() + "`"
	exec := func(ctx context.Context, query string, args ...any) error {
		_, err := db.ExecContext(ctx, query, args...)
		return err
	}
	inIDs := func(ids []uuid.UUID) (string, []any) {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id[:]
		}
		return "id IN (" + strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ") + ")", args
	}
	h := harness(t, store)
	if store.HoldsClaims() {
		// Claims in key order are leased by their columns on MySQL (New
		// refuses OrderByKey with TransactionLeases): the model's key-order
		// runs, which take every claim as held, do not apply.
		h.CountHeld = countHeld(db, store.Name())
		h.KeyOrdered, h.KeyOrderedSkippingDead = nil, nil
	}
	return storetest.ModelHarness{
		Harness: h,
		// MariaDB keeps a held claim's lock on the entry past the due rows
		// it read (docs/stores.md).
		HeldClaimsKeepTheNextEntry: store.HoldsClaims(),
		KillConnections: func(ctx context.Context) error {
			return killSessions(ctx, db)
		},
		Reschedule: func(ctx context.Context, ids []uuid.UUID, at time.Time) error {
			in, args := inIDs(ids)
			return exec(ctx, `UPDATE `+q+` SET available_at = ? WHERE `+in, append([]any{at.UTC().Format("2006-01-02 15:04:05.000000")}, args...)...)
		},
		Rows: func(ctx context.Context) ([]outboxdriver.Message, error) { return modelRows(ctx, db, q) },
		SetPayload: func(ctx context.Context, id uuid.UUID, payload []byte) error {
			return exec(ctx, `UPDATE `+q+` SET payload = ? WHERE id = ?`, payload, id[:])
		},
		Touch: func(ctx context.Context, ids []uuid.UUID) error {
			in, args := inIDs(ids)
			return exec(ctx, `UPDATE `+q+` SET available_at = available_at WHERE `+in, args...)
		},
		// OPTIMIZE rebuilds an InnoDB table (and its indexes); ANALYZE
		// renews the statistics the plans of the claim are chosen by.
		Vacuum: func(ctx context.Context, full bool) error {
			stmt := `ANALYZE TABLE `
			if full {
				stmt = `OPTIMIZE TABLE `
			}
			rows, err := db.QueryContext(ctx, stmt+q)
			if err != nil {
				return err
			}
			return rows.Close()
		},
	}
}

// killSessions ends every other session on db's database, as a server
// restart would end the store's.
func killSessions(ctx context.Context, db *sql.DB) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rows, err := c.QueryContext(ctx, `SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()`)
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, id := range ids {
		// A session that ended by itself meanwhile is no error.
		if _, err := c.ExecContext(ctx, `KILL ?`, id); err != nil && !strings.Contains(err.Error(), "Unknown thread id") {
			return err
		}
	}
	return nil
}

// modelRows reads every row of the table q.
func modelRows(ctx context.Context, db *sql.DB, q string) ([]outboxdriver.Message, error) {
	rows, err := db.QueryContext(ctx, "SELECT id, topic, `key`, payload, headers, created_at, available_at, attempts, last_error, status, published_at FROM "+q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outboxdriver.Message
	for rows.Next() {
		var (
			m                  outboxdriver.Message
			id, topic, key     []byte
			headers, lastError sql.NullString
			created, available time.Time
			published          sql.NullTime
		)
		if err := rows.Scan(&id, &topic, &key, &m.Payload, &headers, &created, &available, &m.Attempts, &lastError, &m.Status, &published); err != nil {
			return nil, err
		}
		if m.ID, err = uuid.FromBytes(id); err != nil {
			return nil, err
		}
		m.Topic, m.Key = string(topic), string(key)
		if headers.Valid && headers.String != "" {
			if err := json.Unmarshal([]byte(headers.String), &m.Headers); err != nil {
				return nil, err
			}
		}
		m.CreatedAt, m.AvailableAt = created.UTC(), available.UTC()
		m.LastError = lastError.String
		if published.Valid {
			m.PublishedAt = published.Time.UTC()
		}
		out = append(out, m)
	}
	return out, rows.Err()
}
