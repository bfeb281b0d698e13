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
// Transact runs the application's transaction, writes the recorded events of
// every aggregate it touched through the Writer in one call (one round
// trip), and clears them from the aggregates once the transaction committed:
//
//	order.Place(...)                       // order embeds outboxevents.Recorder
//	err := outboxevents.Transact(ctx, writer, reg, func(ctx context.Context, tx pgx.Tx) error {
//		return saveOrderRows(ctx, tx, order) // the business rows
//	}, order, customer)
//
// An application that runs its own transactions calls Save inside one and
// Clear after its commit. The events stay recorded until then, so a
// transaction that is rolled back and run again writes them again.
//
// An aggregate that has an EventKey() string method gives its events that
// key (ordering per key, partitioning).
//
// # Handlers
//
// A Dispatcher runs typed handlers, any number per event type, each with a
// name, and is an outbox.Publisher for a relay in the same process:
//
//	d, err := outboxevents.NewDispatcher(reg, inboxTable)
//	outboxevents.Handle(d, "read-model", func(ctx context.Context, tx pgx.Tx, e OrderPlaced) error { ... })
//	outboxevents.Handle(d, "welcome-mail", func(ctx context.Context, tx pgx.Tx, e OrderPlaced) error { ... })
//	relay, _ := outbox.NewRelay(store, d, outbox.Config{})
//
// Each handler runs in a transaction of its own with an inbox record whose
// consumer is the handler's name, so the handler's changes and the record
// commit together, and each handler decides for its own share of the event
// only: the others run and commit whatever it does, and a retry of the
// event runs only the handlers that have not applied it yet (the inbox
// record skips the others).
//
//   - A handler that fails (an ordinary error) makes the event retried, with
//     the relay's backoff, counting an attempt; after MaxAttempts the event
//     is dead-lettered, and `outbox dead retry` runs again only the handlers
//     that have not applied it.
//   - A handler that fails for good (outbox.Permanent) has its share parked
//     in the inbox table's parked messages, under the handler's name; the
//     event counts as published for the others. `outbox inbox parked list`
//     shows it; after the fix, `outbox inbox parked retry --consumer <handler
//     name>` asks for a retry, which a process running
//     Dispatcher.RetryParked takes and runs with that handler alone. Only
//     RetryParked runs a parked share: when the relay hands the event again
//     (another handler failed, or an unavailable one held it back), the
//     handler whose share is parked is not run on it, even if it was fixed
//     meanwhile. A parked share holds the rest of its key for that handler,
//     as a message a consumer parks does: the handler's shares of the key's
//     later events are parked as waiting behind it (the event counts as
//     published for the others, and the handler goes on with its other
//     keys), and the retry applies them after it, in order; one that fails
//     for good again becomes the key's new parked head. With the option
//     SkipParkedInKeyOrder the handler applies them as they come instead,
//     and each success of the handler on an event of the key adds one to
//     Overtaken of each of its parked shares of the key, so that `outbox
//     inbox parked retry` asks for --force; the event whose share is parked
//     never counts on itself, since the handler is not run on it, while a
//     later event the relay hands again for another handler counts again
//     (the count may overstate, never understate). That option costs a
//     look-up of the handler's parked share before each run (the default
//     costs it only on events with no key, which a parked share does not
//     hold). With an inbox table that keeps no parked messages, the event
//     is dead-lettered instead; one that parks but cannot hold a key (no
//     outbox.KeyParkStore) is refused by NewDispatcher unless
//     SkipParkedInKeyOrder is given.
//   - A handler whose destination is unavailable (outbox.Unavailable) is not
//     run again for a pause (100 ms, doubling up to 5 s while it stays
//     unavailable), and the events it has not applied are held back until
//     then, counting no attempt (unless another handler of the event failed
//     too): an outage of any length dead-letters nothing. The relay does
//     not pause, so the other handlers' events go on.
//
// The event counts as published when every handler has applied it, now or
// before, or had its share parked. An event whose type no handler takes is
// published at once. A message whose type is not registered, or whose body
// does not decode, is dead-lettered at once: no retry can help. So in a
// rolling deploy that adds an event type, deploy the handlers before the
// writers (dead letters can be retried with `outbox dead retry`). An event
// written at a newer Version than this process knows is retried instead,
// with the relay's backoff, until an upgraded process takes it. Handlers of a
// batch run one message after the other; the events of one key are applied
// in the order they were written when the store orders by key (OrderByKey
// in outboxpg.Options and outboxsqlite.Options), since otherwise a retried
// event may be overtaken by a later one.
//
// # Brokers
//
// Events written this way are ordinary outbox messages: any publisher sends
// them. The same Dispatcher consumes them from a broker: Deliver is the
// handler of every consumer adapter, each handler applying each event once
// with its own inbox record, as in process:
//
//	err := outboxamqp.Consume(ctx, url, outboxamqp.ConsumerConfig{Queue: "billing", Name: "billing", Parked: inboxTable}, d.Deliver)
//
// Run RetryParked in the same process for the retries operators request of
// a handler's parked share. A handler name may handle several types (Handle
// once per type), so that an aggregate's events reach it in order across
// types. Middleware given with Use wraps every handler run on both paths
// (Recover, Timeout, Classify, PermanentOn, Log), and MessageOf gives a
// handler its message. A consumer in another language decodes the
// CloudEvents headers; a Go consumer without handlers calls Registry.Decode.
//
// # Evolving events
//
// Rename a type's wire name with Alias (messages under the old name still
// decode), and change its shape with Version and Upcast: a message written at
// an older version is turned into the current shape, one version at a time,
// before it is decoded.
package outboxevents
