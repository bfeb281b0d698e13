package outboxaws_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/publishertest"
)

// A message that cannot be sent to the park queue (it does not exist) is
// not deleted: it stays in the queue, and the missing park queue is logged
// at ERROR level with the fix naming ParkQueue.
func TestAMessageIsNotDeletedWhenTheParkQueueRefusesIt(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	c := srv.SQSConsumerClient(t)
	park := srv.URL + "/" + awstest.AccountID + "/" + awstest.Name("outboxaws-missing-parked-")
	batch := publishertest.Messages("orders.created", 1)
	publishSQS(t, srv, queue, batch...)
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", ParkQueue: park, MaxDeliver: 1},
		func(outbox.Message, int) error { return errors.New("no such customer (injected)") })
	r.WaitFor(t, "the missing park queue logged", func() bool {
		return r.Logs.Has(slog.LevelError, "create the park queue", "ConsumerSQSConfig.ParkQueue")
	})
	r.WaitFor(t, "parking given up", func() bool { return r.Logs.Has(slog.LevelError, "parking failed") })
	if n := queueLength(t, c, queue); n != 1 {
		t.Errorf("the queue holds %d messages after a failed parking, want the message kept", n)
	}
}

// With Parked, a message that keeps failing is written to the consumer's
// database under Name, then deleted from the queue.
func TestAMessageThatKeepsFailingIsParkedInTheConsumersDatabase(t *testing.T) {
	t.Parallel()
	srv := awstest.Start(t)
	queue := srv.Queue(t, "outboxaws-consume-", nil)
	c := srv.SQSConsumerClient(t)
	batch := publishertest.Messages("orders.created", 2)
	publishSQS(t, srv, queue, batch...)
	parked := &memParked{}
	r := startConsume(t, c, outboxaws.ConsumerSQSConfig{Queue: queue, Name: "billing", Parked: parked, MaxDeliver: 2},
		func(m outbox.Message, _ int) error {
			if m.ID == batch[0].ID {
				return errors.New("no such customer (injected)")
			}
			return nil
		})
	r.WaitHandled(t, batch[1])
	r.WaitFor(t, "the message parked", func() bool { _, ok := parked.get(batch[0].ID); return ok })
	r.WaitFor(t, "every message deleted", func() bool { return queueLength(t, c, queue) == 0 })
	p, _ := parked.get(batch[0].ID)
	if p.consumer != "billing" || p.attempts != 2 || string(p.m.Payload) != string(batch[0].Payload) {
		t.Errorf("parked %+v; want it under billing after 2 attempts with its payload", p)
	}
}

// memParked is a ParkStore in memory, for ConsumeSQS's Parked.
type memParked struct {
	mu     sync.Mutex
	parked map[uuid.UUID]parkedEntry
}

type parkedEntry struct {
	consumer string
	m        outbox.Message
	attempts int
	retry    bool
}

func (p *memParked) Park(_ context.Context, consumer string, m outbox.Message, attempts int, _ string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parked == nil {
		p.parked = map[uuid.UUID]parkedEntry{}
	}
	p.parked[m.ID] = parkedEntry{consumer: consumer, m: m, attempts: attempts}
	return nil
}

func (p *memParked) TakeRetries(_ context.Context, consumer string, limit int) ([]outbox.Message, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []outbox.Message
	for id, e := range p.parked {
		if e.consumer == consumer && e.retry && len(out) < limit {
			e.retry = false
			p.parked[id] = e
			out = append(out, e.m)
		}
	}
	return out, nil
}

func (p *memParked) Unpark(_ context.Context, consumer string, id uuid.UUID) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.parked[id]; ok && e.consumer == consumer {
		delete(p.parked, id)
	}
	return nil
}

func (p *memParked) get(id uuid.UUID) (parkedEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.parked[id]
	return e, ok
}
