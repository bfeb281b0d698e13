package bench

// Go benchmarks of the SQLite store: relays draining a backlog from one
// database file, and concurrent writers. They need no server.

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
)

func sqliteSetup(b *testing.B) *outboxsqlite.Store {
	b.Helper()
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "bench.db")
	store, err := outboxsqlite.Open(ctx, path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		b.Fatal(err)
	}
	return store
}

// sqliteFill inserts n pending messages with 256-byte payloads and keys
// keys (round robin) in one statement. Ids are random version-4 UUIDs in
// canonical text form.
func sqliteFill(b *testing.B, db *sql.DB, n, keys int) {
	b.Helper()
	_, err := db.Exec(`
WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < ?1)
INSERT INTO outbox (id, topic, key, payload, created_at, available_at)
SELECT lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-a' ||
		substr(hex(randomblob(2)), 2) || '-' || hex(randomblob(6))),
	'bench', CAST(n % ?2 AS TEXT), CAST(zeroblob(256) AS BLOB),
	CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST(unixepoch('subsec') * 1000000 AS INTEGER)
FROM g`, n, keys)
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSQLiteRelayDrain measures how fast relays drain a backlog of one
// SQLite file to a no-op publisher, by batch size and relay count (relays in
// one process, sharing the Store).
func BenchmarkSQLiteRelayDrain(b *testing.B) {
	for _, batch := range []int{10, 100, 1000} {
		for _, relays := range []int{1, 2} {
			b.Run(fmt.Sprintf("batch=%d/relays=%d", batch, relays), func(b *testing.B) {
				store := sqliteSetup(b)
				drain(b, store, batch, relays, func() { sqliteFill(b, store.DB(), backlog, 64) })
			})
		}
	}
}

// BenchmarkSQLiteRelayDrainKeyOrder is BenchmarkSQLiteRelayDrain with claims
// in key order, by the number of keys the backlog spreads over.
func BenchmarkSQLiteRelayDrainKeyOrder(b *testing.B) {
	for _, keys := range []int{64, 10000} {
		for _, batch := range []int{100, 1000} {
			b.Run(fmt.Sprintf("keys=%d/batch=%d", keys, batch), func(b *testing.B) {
				store := sqliteSetup(b)
				ordered, err := outboxsqlite.New(store.DB(), outboxsqlite.Options{OrderByKey: true})
				if err != nil {
					b.Fatal(err)
				}
				drain(b, ordered, batch, 1, func() { sqliteFill(b, store.DB(), backlog, keys) })
			})
		}
	}
}

// BenchmarkSQLiteWriterCommits measures commits per second of 8 concurrent
// writers on one SQLite file, each transaction inserting one message: they
// take turns on the file's write lock and each commit waits for its fsync.
func BenchmarkSQLiteWriterCommits(b *testing.B) {
	store := sqliteSetup(b)
	w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	b.SetParallelism(4) // 8 writers on 2 cores
	start := time.Now()
	var failed atomic.Bool
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error {
				return w.Write(ctx, tx, &outbox.Message{Topic: "bench", Payload: payload})
			})
			if err != nil && !failed.Swap(true) {
				b.Error(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
}

// requireDrained fails b unless store has nothing pending.
func requireDrained(b *testing.B, admin outboxdriver.Admin) {
	b.Helper()
	st, err := admin.Stats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if st.Pending != 0 {
		b.Fatalf("%d messages pending after the drain; want none", st.Pending)
	}
}
