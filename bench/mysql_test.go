package bench

// Go benchmarks of the MySQL/MariaDB store (outboxmysql), in the form of
// PostgreSQL's: relays draining a backlog, in key order too, against the
// SQL ceiling of a bare claim-and-delete loop on the same server, and
// concurrent writers. They need TEST_MYSQL_URL (eval "$(scripts/mysql-up)").

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
)

func mysqlSetup(b *testing.B, opts outboxmysql.Options) (*sql.DB, *outboxmysql.Store) {
	b.Helper()
	db := mysqltest.DB(b)
	m, err := outboxmysql.NewMigrator(db, opts)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		b.Fatal(err)
	}
	store, err := outboxmysql.New(db, opts)
	if err != nil {
		b.Fatal(err)
	}
	return db, store
}

// mysqlFill inserts n pending messages with 256-byte payloads and keys keys
// (round robin), in statements of 1,000 rows (MariaDB's default
// max_recursive_iterations).
func mysqlFill(b *testing.B, db *sql.DB, n, keys int) {
	b.Helper()
	for done := 0; done < n; done += 1000 {
		_, err := db.Exec(`
INSERT INTO outbox (id, topic, `+"`key`"+`, payload, created_at, available_at)
WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < ?)
SELECT UNHEX(REPLACE(UUID(), '-', '')), 'bench', CAST((? + i) % ? AS CHAR), REPEAT('x', 256), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6)
FROM g`, min(1000, n-done), done, keys)
		if err != nil {
			b.Fatal(err)
		}
	}
	if _, err := db.Exec(`ANALYZE TABLE outbox`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMySQLRelayDrain drains the backlog to a no-op publisher, by
// batch size, with one relay of two workers.
func BenchmarkMySQLRelayDrain(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db, store := mysqlSetup(b, outboxmysql.Options{})
			drain(b, store, batch, 1, func() { mysqlFill(b, db, backlog, 64) })
		})
	}
}

// BenchmarkMySQLRelayDrainTransactionLeases is BenchmarkMySQLRelayDrain
// with claims held in transactions (outboxmysql.Options.TransactionLeases):
// the shape of the ceiling's loop, one write of each row.
func BenchmarkMySQLRelayDrainTransactionLeases(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			db, store := mysqlSetup(b, outboxmysql.Options{TransactionLeases: true})
			drain(b, store, batch, 1, func() { mysqlFill(b, db, backlog, 64) })
		})
	}
}

// BenchmarkMySQLRelayDrainKeyOrder is BenchmarkMySQLRelayDrain at batch
// 1000 in key order, by the number of keys the backlog spreads over.
func BenchmarkMySQLRelayDrainKeyOrder(b *testing.B) {
	for _, keys := range []int{1, 64, 10000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			db, store := mysqlSetup(b, outboxmysql.Options{OrderByKey: true})
			drain(b, store, 1000, 1, func() { mysqlFill(b, db, backlog, keys) })
		})
	}
}

// BenchmarkMySQLRawDeleteCeiling is the SQL ceiling on MySQL, which has no
// DELETE ... RETURNING: two loops (as a relay runs two workers), each a
// READ COMMITTED transaction that reads the oldest rows with FOR UPDATE
// SKIP LOCKED, deletes them by id and commits; no lease, no publisher.
func BenchmarkMySQLRawDeleteCeiling(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d/loops=2", batch), func(b *testing.B) {
			db, _ := mysqlSetup(b, outboxmysql.Options{})
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				mysqlFill(b, db, backlog, 64)
				b.StartTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for range 2 {
					wg.Go(func() {
						if err := mysqlDeleteLoop(context.Background(), db, batch); err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(backlog*b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}

// mysqlDeleteLoop claims and deletes batches until none is left.
func mysqlDeleteLoop(ctx context.Context, db *sql.DB, batch int) error {
	for {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT id, topic, `+"`key`"+`, payload, headers FROM outbox
WHERE status = 'pending' AND available_at <= UTC_TIMESTAMP(6) ORDER BY available_at, id LIMIT ? FOR UPDATE SKIP LOCKED`, batch)
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		var ids []any
		for rows.Next() {
			var (
				id, topic, key, payload []byte
				headers                 sql.NullString
			)
			if err := rows.Scan(&id, &topic, &key, &payload, &headers); err != nil {
				rows.Close()
				_ = tx.Rollback()
				return err
			}
			ids = append(ids, id)
		}
		rows.Close()
		if len(ids) == 0 {
			return tx.Commit()
		}
		q := "DELETE FROM outbox WHERE id IN (?"
		for range len(ids) - 1 {
			q += ",?"
		}
		if _, err := tx.ExecContext(ctx, q+")", ids...); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
}

// BenchmarkMySQLWriterCommits measures commits per second of 8 concurrent
// writers, each transaction inserting one message.
func BenchmarkMySQLWriterCommits(b *testing.B) {
	db, store := mysqlSetup(b, outboxmysql.Options{})
	w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, 256)
	b.SetParallelism(4) // 8 writers on 2 cores
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			tx, err := db.BeginTx(ctx, nil)
			if err == nil {
				if err = w.Write(ctx, tx, &outbox.Message{Topic: "bench", Payload: payload}); err == nil {
					err = tx.Commit()
				} else {
					_ = tx.Rollback()
				}
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
}

// BenchmarkMySQLWriterOverhead is the writer-overhead measurement of
// docs/benchmarks.md on MariaDB: a business transaction (BEGIN, insert an
// order row, ..., COMMIT, through Store.RunInTx) on one connection, each
// kind mysqlOverheadRounds times per iteration, the kinds interleaved;
// it reports each kind's p50 and p95 in milliseconds.
func BenchmarkMySQLWriterOverhead(b *testing.B) {
	db, store := mysqlSetup(b, outboxmysql.Options{})
	db.SetMaxOpenConns(1)
	for _, ddl := range []string{
		`CREATE TABLE orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, total BIGINT NOT NULL)`,
		`CREATE TABLE plain (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload VARBINARY(300) NOT NULL)`,
	} {
		if _, err := db.Exec(ddl); err != nil {
			b.Fatal(err)
		}
	}
	w, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	payload := payloadOf(256)
	messages := func(n int) []*outbox.Message {
		msgs := make([]*outbox.Message, n)
		for i := range msgs {
			msgs[i] = &outbox.Message{Topic: "orders.created", Key: "order", Payload: payload}
		}
		return msgs
	}
	kinds := []struct {
		name string
		then func(ctx context.Context, tx *sql.Tx) error
	}{
		{"order", func(context.Context, *sql.Tx) error { return nil }},
		{"order+plain", func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO plain (payload) VALUES (?)`, payload)
			return err
		}},
		{"order+1msg", func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, messages(1)...) }},
		{"order+10msgs", func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, messages(10)...) }},
	}
	took := make([][]time.Duration, len(kinds))
	ctx := context.Background()
	for range b.N {
		for round := range mysqlOverheadRounds {
			for j := range kinds {
				k := kinds[(round+j)%len(kinds)]
				start := time.Now()
				err := store.RunInTx(ctx, func(tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, total) VALUES (?, ?)`, "customer", 4200); err != nil {
						return err
					}
					return k.then(ctx, tx)
				})
				if err != nil {
					b.Fatal(err)
				}
				i := (round + j) % len(kinds)
				took[i] = append(took[i], time.Since(start))
			}
		}
	}
	for i, k := range kinds {
		slices.Sort(took[i])
		b.ReportMetric(float64(percentile(took[i], 0.5).Microseconds())/1000, "ms-p50-"+k.name)
		b.ReportMetric(float64(percentile(took[i], 0.95).Microseconds())/1000, "ms-p95-"+k.name)
	}
}

// mysqlOverheadRounds is how many transactions of each kind an iteration
// of BenchmarkMySQLWriterOverhead commits.
const mysqlOverheadRounds = 2000
