package outboxpg_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// Set up the table, write a message in the application's transaction, and run
// a relay that prints what it publishes.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	migrator, err := outboxpg.NewMigrator(pool, outboxpg.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx); err != nil {
		log.Fatal(err)
	}
	store, err := outboxpg.New(pool, outboxpg.Options{})
	if err != nil {
		log.Fatal(err)
	}
	writer, err := outbox.NewWriter[pgx.Tx](store, outbox.WriterConfig{})
	if err != nil {
		log.Fatal(err)
	}

	err = writer.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET state = 'paid' WHERE id = $1`, "o-42"); err != nil {
			return err
		}
		return writer.Write(ctx, tx, &outbox.Message{Topic: "orders.paid", Key: "o-42", Payload: []byte(`{"order":"o-42"}`)})
	})
	if err != nil {
		log.Fatal(err)
	}

	relay, err := outbox.NewRelay(store, &outbox.JSONLines{}, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Write through database/sql, in a transaction the application manages.
func ExampleNewSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	inserter, err := outboxpg.NewSQL(db, outboxpg.Options{Schema: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	writer, err := outbox.NewWriter[*sql.Tx](inserter, outbox.WriterConfig{})
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := writer.Write(ctx, tx, &outbox.Message{Topic: "invoices.sent", Payload: []byte(`{}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	writer.Notify() // wake the relays of this process at once
}

// Print the migrations for another migration tool.
func ExampleMigrator_SQL() {
	m, err := outboxpg.NewMigrator(nil, outboxpg.Options{Schema: "billing", Table: "outbox"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(m.SQL(outboxpg.DirectionDown))
	// Output:
	// -- 010_minutes.down.sql
	// DROP TABLE "billing"."outbox_minutes";
	// -- 009_paused.down.sql
	// DROP TABLE "billing"."outbox_paused";
	// -- 008_attempts.down.sql
	// DROP TABLE "billing"."outbox_attempts";
	// -- 007_relays.down.sql
	// DROP TABLE "billing"."outbox_relays";
	// -- 006_overtaken.down.sql
	// ALTER TABLE "billing"."outbox" DROP COLUMN overtaken;
	// -- 005_dead_key.down.sql
	// DROP INDEX "billing"."outbox_key_dead_idx";
	// -- 004_queue_autovacuum.down.sql
	// -- Back to the cluster's autovacuum settings for this table.
	// ALTER TABLE "billing"."outbox" RESET (
	// 	autovacuum_vacuum_scale_factor,
	// 	autovacuum_vacuum_threshold,
	// 	autovacuum_vacuum_cost_delay,
	// 	autovacuum_analyze_scale_factor,
	// 	autovacuum_analyze_threshold
	// );
	// -- 003_key_order.down.sql
	// DROP INDEX "billing"."outbox_key_idx";
	// ALTER TABLE "billing"."outbox" DROP COLUMN seq;
	// -- 002_lease_column.down.sql
	// -- Leases go back into available_at, where version 1 keeps them.
	// UPDATE "billing"."outbox" SET available_at = locked_until
	// WHERE status = 'pending' AND lease_token IS NOT NULL AND locked_until > now();
	//
	// ALTER TABLE "billing"."outbox" RESET (fillfactor);
	// ALTER TABLE "billing"."outbox" DROP COLUMN locked_until;
	// -- 001_create_outbox.down.sql
	// -- Drops the outbox table with every message in it. The schema is left alone:
	// -- other tables may live in it.
	// DROP TABLE "billing"."outbox";
}
