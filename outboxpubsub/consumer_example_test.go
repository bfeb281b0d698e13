package outboxpubsub_test

import (
	"context"
	"database/sql"
	"log"

	"cloud.google.com/go/pubsub/v2"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
)

// A consumer applying each message of the subscription "billing" once,
// through an inbox table in its own database (outboxpg.InboxTable,
// outboxsqlite.InboxTable), which also keeps the messages that keep
// failing, in key order. With message ordering on the subscription, each
// key's messages are applied in order.
func ExampleConsume() {
	ctx := context.Background()
	client, err := pubsub.NewClient(ctx, "my-project") // credentials: GOOGLE_APPLICATION_CREDENTIALS or the metadata server
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	var table interface {
		outbox.InboxStore[*sql.Tx]
		outbox.ParkStore
	} // e.g. outboxsqlite.NewInboxTable(db, outboxsqlite.InboxOptions{})
	apply := outbox.ApplyOnce(table, func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (?)`, m.Key)
		return err
	})
	err = outboxpubsub.Consume(ctx, client, outboxpubsub.ConsumerConfig{
		Subscription: "billing",
		Name:         "billing", // the consumer's name: its inbox records and parked messages
		Parked:       table,
	}, apply)
	if err != nil { // a bad configuration or a closed client; nil once ctx ends
		log.Fatal(err)
	}
}
