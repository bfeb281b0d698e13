package main

import (
	"bytes"
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxnats"
	"github.com/go-outbox/outbox/publishertest"
)

func TestNATSURLNamesServersStreamPrefixAndCredentials(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want natsTarget
	}{
		{"nats://localhost", natsTarget{servers: []string{"nats://localhost:4222"}}},
		{"nats://n1:4223,n2,[::1]:4224/?stream=ORDERS&subject_prefix=orders.",
			natsTarget{servers: []string{"nats://n1:4223", "nats://n2:4222", "nats://[::1]:4224"}, stream: "ORDERS", subjectPrefix: "orders."}},
		{"NATS://u:p%40ss@n1:4222?ack_timeout=3s", natsTarget{servers: []string{"nats://n1:4222"}, user: "u", password: "p@ss", ackTimeout: 3 * time.Second}},
		{"tls://s3cr3tt0ken@n1?tls_ca=/etc/ca.pem", natsTarget{servers: []string{"tls://n1:4222"}, token: "s3cr3tt0ken", tlsCA: "/etc/ca.pem"}},
		{"nats://n1?creds=/etc/relay.creds", natsTarget{servers: []string{"nats://n1:4222"}, creds: "/etc/relay.creds"}},
	} {
		got, err := parseNATSURL(tc.raw)
		if err != nil {
			t.Errorf("parseNATSURL(%q): %v", tc.raw, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseNATSURL(%q) = %+v, want %+v", tc.raw, got, tc.want)
		}
	}
}

// Not parallel: credentials in a --publisher URL are added to the command's
// list of secrets, which parallel tests read without a lock.
func TestNATSURLErrorsSayWhatToWriteAndHideTheCredentials(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"nats://", "no server address"},
		{"nats://n1:x", "port"},
		{"nats://n1/ORDERS", "?stream="},
		{"nats://n1?stream=A.B", "stream="},
		{"nats://n1?subject_prefix=a%20b.", "subject_prefix="},
		{"nats://n1?ack_timeout=soon", "ack_timeout="},
		{"nats://u:s3cret@n1?creds=/x.creds", "exclude each other"},
		{"nats://s3cret@n1?acks=all", "unknown parameter"},
		{"nats://:s3cret@n1", "user:password@ or token@"},
	} {
		code, _, stderr := cli(t, "relay", "--publisher", tc.raw, "--database-url", "postgres://x@127.0.0.1:1/db")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("relay --publisher %s: exit %d, stderr %q; want exit 2 and %q", tc.raw, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("relay --publisher %s printed the credentials: %q", tc.raw, stderr)
		}
	}
}

func TestRelayRefusesToStartWhenTheStreamDoesNotExist(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	code, _, stderr := cli(t, "relay", "--publisher", srv.URL()+"?stream=MISSING", "--database-url", "postgres://x@127.0.0.1:1/db")
	if code != 1 || !strings.Contains(stderr, `stream "MISSING" not found`) {
		t.Fatalf("relay with a missing stream: exit %d, stderr %q; want exit 1 naming the stream", code, stderr)
	}
}

// Not parallel: see TestNATSURLErrorsSayWhatToWriteAndHideTheCredentials.
func TestRelayPublishesToNATSWithCredentialsFromTheURL(t *testing.T) {
	for _, tc := range []struct {
		name     string
		server   server.Options
		userinfo string
	}{
		{"user and password", server.Options{Username: "relay", Password: "pa55-w0rd"}, "relay:pa55-w0rd@"},
		{"token", server.Options{Authorization: "t0ken-s3cret"}, "t0ken-s3cret@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testRelayPublishesToNATS(t, tc.server, tc.userinfo)
		})
	}
}

func testRelayPublishesToNATS(t *testing.T, opts server.Options, userinfo string) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	srv := natstest.StartWith(t, opts)
	js, err := outboxnats.Dial(strings.Replace(srv.URL(), "://", "://"+userinfo, 1), outboxnats.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := js.JetStream().CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}

	db := []string{"--database-url", url, "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("migrate", "up")...)
	var ids []string
	for _, key := range []string{"o-1", "o-2", "o-1"} {
		ids = append(ids, strings.TrimSpace(mustCLI(t, with("send", "--topic", "created", "--key", key, "--payload", `{"key":"`+key+`"}`)...)))
	}

	relayCtx, stopRelay := context.WithCancel(ctx)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	publisher := strings.Replace(srv.URL(), "://", "://"+userinfo, 1) + "?stream=ORDERS&subject_prefix=orders."
	go func() {
		done <- run(relayCtx, with("relay", "--publisher", publisher, "--poll-interval", "100ms", "--log-level", "debug"), &bytes.Buffer{}, &stderr)
	}()

	cons, err := js.JetStream().OrderedConsumer(ctx, "ORDERS", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < len(ids) && ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		if msg.Subject() != "orders.created" {
			t.Errorf("message on subject %q, want orders.created", msg.Subject())
		}
		got = append(got, msg.Headers().Get(outboxnats.HeaderMsgID))
	}
	stopRelay()
	if code := <-done; code != 0 {
		t.Errorf("relay exited with %d: %s", code, stderr.String())
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("NATS received messages %v, want %v; relay stderr: %s", got, ids, stderr.String())
	}
	secret := strings.TrimSuffix(userinfo[strings.Index(userinfo, ":")+1:], "@")
	if strings.Contains(stderr.String(), secret) {
		t.Fatalf("the relay logged the credentials: %s", stderr.String())
	}
}

// The relay starts while NATS is down, and publishes once it is up.
func TestNATSPublisherStartsWhileTheServerIsDown(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.Shutdown()
	pub, err := openNATS(srv.URL() + "?stream=ORDERS&subject_prefix=orders.&ack_timeout=200ms")
	if err != nil {
		t.Fatalf("openNATS with the server down: %v", err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	batch := publishertest.Messages("created", 1)
	if errs := pub.Publish(ctx, batch); errs[0] == nil || outbox.IsPermanent(errs[0]) {
		t.Fatalf("publish with the server down: %v, want a retryable error", errs[0])
	}
	srv.Restart(t)
	if _, err := srv.JetStream(t).CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	for {
		errs := pub.Publish(ctx, batch)
		if errs[0] == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("publish after the server started: %v", errs[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
