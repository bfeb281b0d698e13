package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// PublishNow publishes the given messages of the relay's table at once,
// without waiting for a worker: those that are pending, due and not leased
// are leased, handed to the publisher and their outcomes recorded, exactly
// as a worker does (a failure is retried later with the backoff, or
// dead-lettered). It returns how many the destination confirmed. Messages
// it cannot take (leased by a worker, published already, waiting for a
// retry, or in a store that orders by key, where the relay keeps each key's
// order) are left to the workers, as are all of them when the store cannot
// lease by id (outboxdriver.IDClaimer). It needs no running Run; its
// failures are logged and returned, and the messages then wait for the
// workers, which are the safety net.
//
// It is seed 004's "incoming message" and "control message" ways to apply
// side effects: an Inbox given the relay with PublishOutgoing publishes a
// handler's outgoing messages before the delivery is acknowledged, and an
// HTTP handler can publish the messages of its own transaction after the
// commit.
func (r *Relay) PublishNow(ctx context.Context, ids ...uuid.UUID) (published int, err error) {
	claimer, ok := r.store.(outboxdriver.IDClaimer)
	if !ok || len(ids) == 0 {
		return 0, nil
	}
	token := uuid.New()
	claimed := time.Now()
	storeCtx, cancel := r.storeCtx(ctx)
	batch, err := claimer.ClaimIDs(storeCtx, ids, outboxdriver.Claim{Lease: r.cfg.LeaseDuration, Token: token})
	cancel()
	if err != nil {
		r.log.Warn("outbox relay: publishing messages at once failed to lease them; the workers will publish them", slog.Int("messages", len(ids)), slog.Any("error", err))
		return 0, err
	}
	if len(batch) == 0 {
		return 0, nil
	}
	settle, notes, _ := r.publish(ctx, token, batch, claimed, errorPauseMin)
	r.recordFailures(ctx, &notes, claimed.Add(r.cfg.LeaseDuration))
	if !r.record(ctx, r.log, settle) {
		return 0, fmt.Errorf("outbox: the outcomes of %d message(s) published at once could not be recorded; those published go out again after their lease", len(batch))
	}
	r.forgetPublished(ctx, notes)
	return len(settle.Published), nil
}

// OutgoingReader is implemented by inbox tables that keep the outgoing
// messages of their records (OutgoingRecorder): Outgoing returns the table
// and the ids of the messages that the handling of message id wrote and
// that are not yet known to be published (none once the purge saw them
// published).
type OutgoingReader interface {
	Outgoing(ctx context.Context, consumer string, id uuid.UUID) (table string, ids []uuid.UUID, err error)
}

// PublishOutgoing makes the inbox publish the messages its handlers write
// to the outbox tables of relays right after the handling commits, with
// Relay.PublishNow, before Handle returns: a consumer adapter acknowledges
// the delivery only after its side effects went out (seed 004's "incoming
// message" way). A duplicate delivery, as after a crash between the commit
// and the acknowledgement, publishes those of its first handling still
// pending, when the inbox table keeps them (OutgoingReader). Publishing
// failures are logged by the relay and left to its workers: they never fail
// the handling, whose commit stands. Call it before the first Handle.
func (in *Inbox[TTx]) PublishOutgoing(relays ...*Relay) {
	if in.relays == nil {
		in.relays = map[string]*Relay{}
	}
	for _, r := range relays {
		in.relays[r.store.Name()] = r
	}
}

// publishOutgoing publishes what the handling of id wrote (when applied),
// or what its first handling wrote and is still pending (a duplicate).
func (in *Inbox[TTx]) publishOutgoing(ctx context.Context, id uuid.UUID, applied bool, wrote *written) {
	if len(in.relays) == 0 {
		return
	}
	if applied {
		wrote.mu.Lock()
		byTable := wrote.byTable
		wrote.mu.Unlock()
		for table, ids := range byTable {
			if r := in.relays[table]; r != nil {
				_, _ = r.PublishNow(ctx, ids...)
			}
		}
		return
	}
	reader, ok := in.store.(OutgoingReader)
	if !ok {
		return
	}
	table, ids, err := reader.Outgoing(ctx, in.consumer, id)
	if err != nil {
		for _, r := range in.relays { // any relay's log will do
			r.log.Warn("outbox inbox: reading the outgoing messages of a duplicate failed; the relays' workers will publish them",
				slog.String("consumer", in.consumer), slog.String("message_id", id.String()), slog.Any("error", err))
			break
		}
		return
	}
	if r := in.relays[table]; r != nil && len(ids) > 0 {
		_, _ = r.PublishNow(ctx, ids...)
	}
}

// TransactAndPublish runs fn in a new transaction as Transact does and, once
// it has committed, publishes the messages fn wrote (through Write, with the
// context fn is given) with relay.PublishNow before it returns: an HTTP
// handler, say, answers after its side effects went out. It is seed 004's
// "control message" way, for writes that do not come from a message: the
// commit itself signals the relay, with the transaction's message ids.
// Publishing failures are logged by the relay and left to its workers,
// never returned: the transaction stands.
func (w *Writer[TTx]) TransactAndPublish(ctx context.Context, relay *Relay, fn func(ctx context.Context, tx TTx) error) error {
	fnCtx, wrote := withWritten(ctx)
	if err := w.Transact(fnCtx, fn); err != nil {
		return err
	}
	wrote.mu.Lock()
	ids := wrote.byTable[relay.store.Name()]
	wrote.mu.Unlock()
	_, _ = relay.PublishNow(ctx, ids...)
	return nil
}
