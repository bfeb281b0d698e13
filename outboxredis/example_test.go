package outboxredis_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxredis"
)

// A relay appending every message to the stream "orders", trimmed to about a
// million entries; Check tells at start whether Redis answers and "orders"
// is a stream.
func ExampleOpen() {
	pub, err := outboxredis.Open("redis://:secret@127.0.0.1:6379/0", outboxredis.Config{
		Stream: "orders",
		MaxLen: 1_000_000,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

	ctx := context.Background()
	if err := pub.Check(ctx); err != nil {
		log.Printf("not publishing yet: %v", err) // the relay retries while Redis is down
	}
	var store outboxdriver.Store // e.g. outboxpg.New(pool, outboxpg.Options{})
	relay, err := outbox.NewRelay(store, pub, outbox.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx)
}

// A service that already has a go-redis client shares it with the publisher;
// each topic gets its own stream, "events:" + topic.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	pub, err := outboxredis.New(rdb, outboxredis.Config{StreamPrefix: "events:"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close() // leaves rdb open
	_ = pub
}
