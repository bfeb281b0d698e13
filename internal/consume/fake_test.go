package consume_test

import (
	"context"
	"sync"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// fakeDelivery is a broker delivery whose acknowledgement and parking the
// tests read back. Several fakeDeliveries may carry one message: a broker's
// redeliveries.
type fakeDelivery struct {
	attempt int
	m       outbox.Message

	mu       sync.Mutex
	acked    bool
	parked   bool
	working  int
	onSettle func(d *fakeDelivery) // called once, when acked or parked
}

func (d *fakeDelivery) Message() outbox.Message { return d.m }
func (d *fakeDelivery) Attempt() int            { return max(d.attempt, 1) }

func (d *fakeDelivery) Ack(context.Context) error {
	d.settle(func() { d.acked = true })
	return nil
}

func (d *fakeDelivery) Park(context.Context, int, error) error {
	d.settle(func() { d.parked = true })
	return nil
}

func (d *fakeDelivery) Working() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.working++
}

func (d *fakeDelivery) settle(mark func()) {
	d.mu.Lock()
	mark()
	on := d.onSettle
	d.mu.Unlock()
	if on != nil {
		on(d)
	}
}

func (d *fakeDelivery) state() (acked, parked bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.acked, d.parked
}

// message returns a message of key with a fresh id.
func message(key string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders", Key: key, Payload: []byte(key)}
}
