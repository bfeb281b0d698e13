package outbox

import (
	"context"
	"fmt"
	"sync"
)

// ApplyOnce returns a consumer adapter's handler that applies each message
// once through an inbox named after the adapter's consumer (its
// ConsumerConfig.Name, Durable or Group, which the adapters put in the
// context, see ConsumerName): the name is given once, in the adapter's
// config, where NewInbox(store, name).Apply(fn) needs it twice, kept equal
// by convention (the adapter parks failed messages under its name, which
// `outbox inbox parked` and the inbox records then share). The name is then
// the inbox's identity: the same in every process of the consumer and
// across releases, or messages are applied again.
//
// One ApplyOnce per adapter: two of them called for one message under one
// adapter share one inbox, and the second skips the message as applied. To
// apply a message with several handlers, use outboxevents.Dispatcher, or
// inboxes of distinct names (NewInbox).
//
//	outboxamqp.Consume(ctx, url, outboxamqp.ConsumerConfig{Queue: "billing", Name: "billing", Parked: table},
//		outbox.ApplyOnce(table, apply))
//
// A message handed over without a consumer name (not by an adapter; the
// webhook receiver, outboxhttp, puts HandlerOptions.Consumer there when
// set) fails with a *ConfigError. For the outbox_inbox_* metrics, use
// NewInbox with Observe instead.
func ApplyOnce[TTx any](store InboxStore[TTx], fn func(ctx context.Context, tx TTx, m Message) error) func(context.Context, Message) error {
	var inboxes sync.Map // consumer name -> *Inbox[TTx]
	return func(ctx context.Context, m Message) error {
		consumer, ok := ConsumerName(ctx)
		if !ok {
			return &ConfigError{Field: "outbox.ApplyOnce consumer", Value: `""`,
				Fix: "hand it to a consumer adapter's Consume, which names the consumer, or use outbox.NewInbox(store, name).Apply(fn)"}
		}
		in, ok := inboxes.Load(consumer)
		if !ok {
			made, err := NewInbox(store, consumer)
			if err != nil {
				// Unavailable: the adapter waits, parking nothing,
				// until the name is fixed.
				return Unavailable(fmt.Errorf("outbox.ApplyOnce: %w", err))
			}
			in, _ = inboxes.LoadOrStore(consumer, made)
		}
		_, err := in.(*Inbox[TTx]).Handle(ctx, m.ID, func(ctx context.Context, tx TTx) error { return fn(ctx, tx, m) })
		return err
	}
}
