package outboxamqp_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/publishertest"
)

// RabbitMQ also routes a message to the queues its CC and BCC headers name.
// A message written before the outbox refused those headers could still
// carry one: the publisher fails that message permanently, naming the
// header, and publishes the rest of the batch.
func TestMessageWithACCOrBCCHeaderFailsPermanentlyAloneAndTheRestIsPublished(t *testing.T) {
	t.Parallel()
	url := amqptest.URL(t)
	d := amqptest.Declare(t, url)
	consumer := amqptest.Consume(t, url, d.Queue)
	p := dial(t, url, outboxamqp.Config{Exchange: d.Exchange})
	ctx := ctxFor(t, 30*time.Second)

	batch := publishertest.Messages(d.RoutingKey, 4)
	forged := map[int]string{1: "CC", 2: "bcc"}
	for i, name := range forged {
		batch[i].Headers[name] = d.RoutingKey
	}
	errs := p.Publish(ctx, batch)
	for i, m := range batch {
		name, refused := forged[i]
		err := errs[i]
		switch {
		case !refused && err != nil:
			t.Errorf("message %s without CC or BCC: %v, want published", m.ID, err)
		case refused && (err == nil || !outbox.IsPermanent(err) || !strings.Contains(err.Error(), `"`+name+`"`)):
			t.Errorf("message %s with header %q: %v, want a permanent error naming the header", m.ID, name, err)
		case refused:
			var pe *outboxamqp.PublishError
			if !errors.As(err, &pe) || pe.ID != m.ID {
				t.Errorf("message %s: %v, want a *outboxamqp.PublishError with its id", m.ID, err)
			}
		}
	}
	// One channel, one queue: whatever the batch put in the queue comes
	// before a message published after it.
	last := publishertest.Messages(d.RoutingKey, 1)
	if err := errors.Join(p.Publish(ctx, last)...); err != nil {
		t.Fatal(err)
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: receiver(consumer)}, []outbox.Message{batch[0], batch[3], last[0]})
}

// The outbox refuses CC and BCC in any case, and the publisher's key header,
// when a message is written.
func TestWriterRefusesCCAndBCCAndThePublishersKeyHeader(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"CC", "cc", "BCC", "Bcc", outboxamqp.HeaderKey, strings.ToUpper(outboxamqp.HeaderKey)} {
		if err := outbox.ValidateHeaderName(name); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("outbox.ValidateHeaderName(%q) = %v, want it reserved", name, err)
		}
	}
}
