package outboxnats_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
	"github.com/go-outbox/outbox/relaytest"
)

// A subject no stream captures yet is a deployment mistake an operator
// fixes: the message fails retryably, counting an attempt, the fix is logged
// at ERROR level, and once a stream covers the subject the message goes
// through.
func TestSubjectWithoutStreamIsRetryableLogsTheFixAndPublishesOnceAStreamCoversIt(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	logs := &relaytest.LogCapture{}
	pub := dial(t, srv, outboxnats.Config{Logger: slog.New(logs)})
	batch := publishertest.Messages("late.orders.created", 2)

	errs := pub.Publish(ctxFor(t, 10*time.Second), batch)
	for i, err := range errs {
		if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) || !errors.Is(err, outboxnats.ErrNoStream) {
			t.Fatalf("message %s to a subject without stream: %v; want a retryable (attempt-counting) ErrNoStream", batch[i].ID, err)
		}
	}
	if !logs.Has(slog.LevelError, "late.orders.created", "add a stream") {
		t.Errorf("no ERROR log naming the subject and the fix; logged:\n%s", logs)
	}

	if _, err := admin.CreateStream(ctxFor(t, 10*time.Second), jetstream.StreamConfig{Name: "LATE", Subjects: []string{"late.>"}}); err != nil {
		t.Fatal(err)
	}
	for i, err := range pub.Publish(ctxFor(t, 10*time.Second), batch) {
		if err != nil {
			t.Fatalf("message %s once a stream covers its subject: %v", batch[i].ID, err)
		}
	}
	publishertest.RequireReceived(t, publishertest.Harness{Receive: receiver(admin, "LATE")}, batch)
}

// Config.Stream names the stream messages must land in; a subject captured
// by another stream is a configuration mistake too, not a bad message.
func TestSubjectOfAnotherStreamThanConfigStreamIsRetryableAndLogsTheFix(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	admin := srv.JetStream(t)
	want, _ := newStream(t, admin, jetstream.StreamConfig{})
	_, other := newStream(t, admin, jetstream.StreamConfig{})
	logs := &relaytest.LogCapture{}
	pub := dial(t, srv, outboxnats.Config{Logger: slog.New(logs), Stream: want})
	m := publishertest.Messages(other+"orders.created", 1)

	err := pub.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
		t.Fatalf("message %s to a subject of another stream than Config.Stream %s: %v; want a retryable error", m[0].ID, want, err)
	}
	if !logs.Has(slog.LevelError, other+"orders.created", want) {
		t.Errorf("no ERROR log naming the subject and stream %s; logged:\n%s", want, logs)
	}
}

// Credentials the server refuses never get better by waiting: the batch is
// not "unavailable" (which would retry it forever without counting), but a
// retryable failure counting an attempt, with the fix logged.
func TestRefusedCredentialsAreRetryableNotUnavailableAndLogTheFix(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWith(t, server.Options{Username: "relay", Password: "right-pw"})
	logs := &relaytest.LogCapture{}
	url := strings.Replace(srv.URL(), "://", "://relay:wrong-pw@", 1)
	pub, err := outboxnats.Open(url, outboxnats.Config{Logger: slog.New(logs), ConnectOptions: natstest.ClientOptions()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	// nats.go reports the refusal only for a moment after the first
	// attempt (it clears the error while it waits to try again) and closes
	// the connection when the server refuses the same credentials twice:
	// wait for that settled state, which is the one a relay lives in.
	waitFor(t, 10*time.Second, "the server to refuse the credentials twice", func() bool {
		nc := pub.JetStream().Conn()
		return nc.IsClosed() && errors.Is(nc.LastError(), nats.ErrAuthorization)
	})

	m := publishertest.Messages("orders.created", 1)
	err = pub.Publish(ctxFor(t, 10*time.Second), m)[0]
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Fatalf("message %s with refused credentials: %v; want a retryable error that counts an attempt", m[0].ID, err)
	}
	if !logs.Has(slog.LevelError, "password") {
		t.Errorf("no ERROR log with the fix; logged:\n%s", logs)
	}
	if strings.Contains(err.Error()+logs.String(), "wrong-pw") {
		t.Errorf("the password leaked: %v\n%s", err, logs)
	}
}
