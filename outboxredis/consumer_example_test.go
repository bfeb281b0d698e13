package outboxredis_test

import (
	"context"
	"database/sql"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxredis"
)

// A consumer group applying each entry of the stream "orders" once, through
// an inbox table in its own database (outboxpg.InboxTable,
// outboxsqlite.InboxTable), which also keeps the messages that keep
// failing, in key order. Entries of a consumer that died are taken over
// after ClaimAfter.
func ExampleConsume() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	var table interface {
		outbox.InboxStore[*sql.Tx]
		outbox.ParkStore
	} // e.g. outboxsqlite.NewInboxTable(db, outboxsqlite.InboxOptions{})
	apply := outbox.ApplyOnce(table, func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO invoices (order_id) VALUES (?)`, m.Key)
		return err
	})
	err := outboxredis.Consume(ctx, rdb, outboxredis.ConsumerConfig{
		Stream:   "orders",
		Group:    "billing",   // the consumer's name: its inbox records and parked messages
		Consumer: "billing-1", // this process, unique in the group (e.g. the pod's name)
		Parked:   table,
	}, apply)
	if err != nil { // only a bad configuration or a closed client; nil once ctx ends
		log.Fatal(err)
	}
}
