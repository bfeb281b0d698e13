package outboxpg_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/storetest"
)

// TestModelOfTheStoreContract runs storetest.RunModel with leases written
// into the rows and with leases held in transactions, each unordered and
// in key order, on a database of its own so that VACUUM removes what it
// may.
func TestModelOfTheStoreContract(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{false, true} {
		name := "leases in columns"
		if held {
			name = "transaction leases"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.RunModel(t, func(t *testing.T) storetest.ModelHarness {
				return modelHarness(t, outboxpg.Options{Schema: "public", TransactionLeases: held})
			})
		})
	}
}

// modelHarness is a harness on a fresh database, with the outside
// operations of an operator on its table.
func modelHarness(t *testing.T, opts outboxpg.Options) storetest.ModelHarness {
	pool := pgtest.Database(t)
	h := pgxHarnessWith(t, pool, opts)
	schema, table, _ := strings.Cut(h.Store.Name(), ".")
	q := pgx.Identifier{schema, table}.Sanitize()
	exec := func(ctx context.Context, sql string, args ...any) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	}
	return storetest.ModelHarness{
		Harness: h,
		KillConnections: func(ctx context.Context) error {
			if err := exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
				return err
			}
			// The idle connections are dead too: the pool must not hand
			// them out, as it would not after a restart it noticed.
			pool.Reset()
			return nil
		},
		Reschedule: func(ctx context.Context, ids []uuid.UUID, at time.Time) error {
			return exec(ctx, `UPDATE `+q+` SET available_at = $1 WHERE id = ANY($2)`, at, ids)
		},
		Rows: modelRows(pool, q),
		SetPayload: func(ctx context.Context, id uuid.UUID, payload []byte) error {
			return exec(ctx, `UPDATE `+q+` SET payload = $1 WHERE id = $2`, payload, id)
		},
		Touch: func(ctx context.Context, ids []uuid.UUID) error {
			return exec(ctx, `UPDATE `+q+` SET available_at = available_at WHERE id = ANY($1)`, ids)
		},
		Vacuum: func(ctx context.Context, full bool) error {
			if full {
				return exec(ctx, `VACUUM FULL `+q)
			}
			return exec(ctx, `VACUUM `+q)
		},
	}
}

// modelRows reads every row of the table q.
func modelRows(pool *pgxpool.Pool, q string) func(ctx context.Context) ([]outboxdriver.Message, error) {
	return func(ctx context.Context) ([]outboxdriver.Message, error) {
		rows, err := pool.Query(ctx, `SELECT id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at FROM `+q)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxdriver.Message, error) {
			var (
				m         outboxdriver.Message
				lastError *string
				published *time.Time
			)
			err := row.Scan(&m.ID, &m.Topic, &m.Key, &m.Payload, &m.Headers, &m.CreatedAt, &m.AvailableAt, &m.Attempts, &lastError, &m.Status, &published)
			if lastError != nil {
				m.LastError = *lastError
			}
			if published != nil {
				m.PublishedAt = *published
			}
			return m, err
		})
	}
}
