package outboxaws_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxaws"
)

// A consumer applying each message of an SQS queue once, through an inbox
// table in its own database (outboxpg.InboxTable, outboxsqlite.InboxTable),
// which also keeps the messages that keep failing, in key order.
func ExampleConsumeSQS() {
	ctx := context.Background()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var table interface {
		outbox.InboxStore[*sql.Tx]
		outbox.ParkStore
	} // e.g. outboxsqlite.NewInboxTable(db, outboxsqlite.InboxOptions{})
	apply := outbox.ApplyOnce(table, func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (?)`, m.Key)
		return err
	})
	err = outboxaws.ConsumeSQS(ctx, sqs.NewFromConfig(awsCfg), outboxaws.ConsumerSQSConfig{
		Queue:  "https://sqs.eu-west-1.amazonaws.com/123456789012/billing",
		Name:   "billing", // the consumer's name: its inbox records and parked messages
		Parked: table,
	}, apply)
	if err != nil { // only a bad configuration; nil once ctx ends
		log.Fatal(err)
	}
}
