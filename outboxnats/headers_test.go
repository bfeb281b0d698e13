package outboxnats_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
)

// A message written before the outbox refused Nats-* headers could still
// carry one, and JetStream would act on it (a rollup purging the subject, a
// second message id deduplicating): the publisher fails that message
// permanently, naming the header, and publishes the rest of the batch.
func TestMessageWithANatsHeaderFailsPermanentlyAloneAndTheRestIsPublished(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	stream, prefix := newStream(t, admin, jetstream.StreamConfig{AllowRollup: true})
	pub := dial(t, srv, outboxnats.Config{SubjectPrefix: prefix})
	ctx := ctxFor(t, 30*time.Second)

	batch := publishertest.Messages("orders.created", 4)
	forged := map[int]string{1: "Nats-Rollup", 2: "nats-msg-id"}
	batch[1].Headers["Nats-Rollup"] = "sub"
	batch[2].Headers["nats-msg-id"] = batch[0].ID.String()

	errs := pub.Publish(ctx, batch)
	for i, m := range batch {
		name, refused := forged[i]
		err := errs[i]
		switch {
		case !refused && err != nil:
			t.Errorf("message %s without a Nats-* header: %v, want published", m.ID, err)
		case refused && (err == nil || !outbox.IsPermanent(err) || !strings.Contains(err.Error(), name)):
			t.Errorf("message %s with header %q: %v, want a permanent error naming the header", m.ID, name, err)
		case refused:
			var pe *outboxnats.PublishError
			if !errors.As(err, &pe) || pe.ID != m.ID {
				t.Errorf("message %s: %v, want a *outboxnats.PublishError with its id", m.ID, err)
			}
		}
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: receiver(admin, stream)}, []outbox.Message{batch[0], batch[3]})
	info, err := admin.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("stream %s holds %d messages, want the 2 without a Nats-* header", stream, n)
	}
}

// The outbox refuses at write time, in any case, every header the
// publisher sets itself and every Nats-* header, so a message cannot pose
// as another or steer JetStream.
func TestWriterRefusesThePublishersHeadersAndNatsHeaders(t *testing.T) {
	t.Parallel()
	for _, name := range []string{outboxnats.HeaderKey, outboxnats.HeaderMsgID, outboxnats.HeaderTopic,
		strings.ToLower(outboxnats.HeaderMsgID), "Nats-Expected-Stream", "NATS-ROLLUP", "nats-ttl"} {
		if err := outbox.ValidateHeaderName(name); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("outbox.ValidateHeaderName(%q) = %v, want it reserved", name, err)
		}
	}
}
