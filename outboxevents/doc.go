// Package outboxevents carries typed domain events through the outbox: an
// aggregate raises them, the transaction that saves it writes them as outbox
// messages, and every handler of an event's type applies it exactly once.
//
// # Registry
//
// A Registry names each event type once, with Register:
//
//	reg := outboxevents.NewRegistry(outboxevents.Options{Source: "/orders-service"})
//	outboxevents.Register[OrderPlaced](reg, "orders.placed")
//
// The name is the event's identity on the wire: the message's Topic and its
// CloudEvents type. Choose it explicitly; an empty name defaults to the Go
// type's own name (OrderPlaced), without its package path, so moving or
// renaming the package keeps it, but renaming the type does not: give the
// old name as an Alias then. Each message carries, in CloudEvents binary
// mode, the headers ce-specversion (1.0), ce-type (the name), ce-id (the
// message id), ce-source (Options.Source), ce-time, ce-schemaversion (the
// type's Version) and content-type (the codec's), so that consumers in any
// language can read them.
//
// # Raising and saving
//
// Entities embed a Recorder and call Record; they need not know the outbox.
// Save takes the recorded events of every aggregate a transaction touched
// and writes them through the Writer in one call (one round trip):
//
//	order.Place(...)                       // order embeds outboxevents.Recorder
//	err := outboxevents.Save(ctx, writer, tx, reg, order, customer)
//
// An aggregate that has an EventKey() string method gives its events that
// key (ordering per key, partitioning).
//
// # Handlers
//
// A Dispatcher runs typed handlers, any number per event type, each with a
// name, and is an outbox.Publisher for a relay in the same process:
//
//	d := outboxevents.NewDispatcher(reg, inboxTable)
//	outboxevents.Handle(d, "read-model", func(ctx context.Context, tx pgx.Tx, e OrderPlaced) error { ... })
//	outboxevents.Handle(d, "welcome-mail", func(ctx context.Context, tx pgx.Tx, e OrderPlaced) error { ... })
//	relay, _ := outbox.NewRelay(store, d, outbox.Config{})
//
// Each handler runs in a transaction of its own with an inbox record whose
// consumer is the handler's name, so the handler's changes and the record
// commit together. When one handler fails, the event is retried (with the
// relay's backoff), and the retry runs only the handlers that have not
// succeeded yet. The event counts as published when every handler has
// succeeded, now or before. An event whose type no handler takes is
// published at once. A message whose type is not registered, or whose body
// does not decode, is dead-lettered at once: no retry can help. Handlers of a
// batch run one message after the other, so events of one key are applied
// in order.
//
// # Brokers
//
// Events written this way are ordinary outbox messages: any publisher sends
// them, and a consumer decodes them with Registry.Decode on the message
// (outboxamqp.FromDelivery, say, gives one).
//
// # Evolving events
//
// Rename a type's wire name with Alias (messages under the old name still
// decode), and change its shape with Version and Upcast: a message written at
// an older version is turned into the current shape, one version at a time,
// before it is decoded.
package outboxevents
