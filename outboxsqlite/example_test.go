package outboxsqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// Create the database file and the table, write a message together with the
// business change, and relay it.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "outbox-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := outboxsqlite.Open(ctx, filepath.Join(dir, "app.db"), outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	migrator, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := store.DB().ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	writer, err := outbox.NewWriter[*sql.Tx](store, outbox.WriterConfig{})
	if err != nil {
		log.Fatal(err)
	}

	err = writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, state) VALUES (?, 'paid')`, "o-42"); err != nil {
			return err
		}
		return writer.Write(ctx, tx, &outbox.Message{Topic: "orders.paid", Key: "o-42", Payload: []byte(`{"order":"o-42"}`)})
	})
	if err != nil {
		log.Fatal(err)
	}

	var handlers outbox.Handlers
	handlers.Handle("orders.paid", func(ctx context.Context, m outbox.Message) error {
		fmt.Printf("%s %s %s\n", m.Topic, m.Key, m.Payload)
		cancel() // one message is all this example relays
		return nil
	})
	relay, err := outbox.NewRelay(store, &handlers, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// orders.paid o-42 {"order":"o-42"}
}

// Print the migrations for another migration tool.
func ExampleMigrator_SQL() {
	m, err := outboxsqlite.NewMigrator(nil, outboxsqlite.Options{Table: "outbox"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(m.SQL(outboxsqlite.DirectionDown))
	// Output:
	// -- 009_minutes.down.sql
	// DROP TABLE "outbox_minutes";
	// -- 008_paused.down.sql
	// DROP TABLE "outbox_paused";
	// -- 007_attempts.down.sql
	// DROP TABLE "outbox_attempts";
	// -- 006_relays.down.sql
	// DROP TABLE "outbox_relays";
	// -- 005_overtaken.down.sql
	// ALTER TABLE "outbox" DROP COLUMN overtaken;
	// -- 004_dead_key.down.sql
	// DROP INDEX "outbox_key_dead_idx";
	// -- 003_lease_column.down.sql
	// -- Leases in force go back into available_at, where versions 1 and 2 keep them:
	// -- the row is due again when its lease ends.
	// UPDATE "outbox" SET available_at = max(available_at, locked_until)
	// WHERE status = 'pending' AND lease_token IS NOT NULL
	// 	AND locked_until > CAST(unixepoch('subsec') * 1000000 AS INTEGER);
	//
	// DROP INDEX "outbox_leased_idx";
	// ALTER TABLE "outbox" DROP COLUMN locked_until;
	// -- 002_key_order.down.sql
	// DROP INDEX "outbox_key_idx";
	// -- 001_create_outbox.down.sql
	// -- Drops the outbox table, its indexes and every message in it.
	// DROP TABLE "outbox";
}
