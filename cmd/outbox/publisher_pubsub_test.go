package main

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpubsub"
)

func TestPubSubURLNamesProjectTopicAndOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw, url, topic, prefix string
		ordering                bool
		timeout                 time.Duration
	}{
		{raw: "pubsub://my-proj/orders", url: "pubsub://my-proj/orders", topic: "orders"},
		{raw: "pubsub://my-proj?topic_prefix=ev-&ordering_keys=true&timeout=3s", url: "pubsub://my-proj", prefix: "ev-", ordering: true, timeout: 3 * time.Second},
		{raw: "pubsub://my-proj", url: "pubsub://my-proj"},
	} {
		u, cfg, err := parsePubSubURL(tc.raw)
		if err != nil {
			t.Errorf("parsePubSubURL(%q): %v", tc.raw, err)
			continue
		}
		if _, topic, _ := outboxpubsub.ParseURL(u); u != tc.url || topic != tc.topic || cfg.TopicPrefix != tc.prefix || cfg.OrderingKeys != tc.ordering || cfg.Timeout != tc.timeout {
			t.Errorf("parsePubSubURL(%q) = %s %+v; want %s, topic %q, prefix %q, ordering %v, timeout %v", tc.raw, u, cfg, tc.url, tc.topic, tc.prefix, tc.ordering, tc.timeout)
		}
	}
}

// Not parallel: credentials in a --publisher URL are added to the command's
// list of secrets, which parallel tests read without a lock.
func TestPubSubURLErrorsSayWhatToWriteAndPrintNoCredentials(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"pubsub://", "no project"},
		{"pubsub://u:s3cret@proj/orders", "GOOGLE_APPLICATION_CREDENTIALS"},
		{"pubsub://proj/orders?topic_prefix=p-", "exclude each other"},
		{"pubsub://proj?ordering_keys=maybe", "ordering_keys="},
		{"pubsub://proj?timeout=soon", "timeout="},
		{"pubsub://proj?acks=all", "unknown parameter"},
		{"pubsub://proj/9lives", "starts with a letter"},
	} {
		code, _, stderr := cli(t, "relay", "--publisher", tc.raw, "--database-url", "postgres://x@127.0.0.1:1/db")
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("relay --publisher %s: exit %d, stderr %q; want exit 2 and %q", tc.raw, code, stderr, tc.want)
		}
		if strings.Contains(stderr, "s3cret") {
			t.Errorf("relay --publisher %s printed the password: %q", tc.raw, stderr)
		}
	}
}

// fakePubSub starts pstest with topic (if not empty) and points the client
// at it through PUBSUB_EMULATOR_HOST, as an operator would the emulator.
func fakePubSub(t *testing.T, topic string) *pstest.Server {
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	t.Setenv("PUBSUB_EMULATOR_HOST", srv.Addr)
	if topic != "" {
		if _, err := srv.GServer.CreateTopic(context.Background(), &pubsubpb.Topic{Name: "projects/outbox-test/topics/" + topic}); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

// Not parallel (PUBSUB_EMULATOR_HOST). Pub/Sub creates no topic on publish:
// a missing one fails the start with the command that creates it, rather
// than failing every batch until an operator reads the log.
func TestRelayRefusesToStartWhenThePubSubTopicIsMissing(t *testing.T) {
	fakePubSub(t, "")
	code, _, stderr := cli(t, "relay", "--publisher", "pubsub://outbox-test/orders", "--database-url", "postgres://x@127.0.0.1:1/db")
	if code != 1 || !strings.Contains(stderr, "gcloud pubsub topics create orders --project outbox-test") || strings.Contains(stderr, "starting") {
		t.Fatalf("relay with a missing topic: exit %d, stderr %q; want exit 1 naming the fix", code, stderr)
	}
}

// Not parallel (PUBSUB_EMULATOR_HOST). The relay publishes to Pub/Sub with
// ordering keys: a key's messages arrive in the order they were sent.
func TestRelayPublishesToPubSubWithOrderingKeys(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	srv := fakePubSub(t, "orders")
	for _, ordering := range []bool{false, true} {
		pub, err := openPubSub("pubsub://outbox-test/orders?ordering_keys=" + strconv.FormatBool(ordering))
		if err != nil {
			t.Fatal(err)
		}
		if _, keeps := pub.(outbox.KeyOrderKeeper); keeps != ordering {
			t.Errorf("ordering_keys=%v: the relay's publisher is a KeyOrderKeeper: %v", ordering, keeps)
		}
		_ = pub.Close()
	}
	db := []string{"--database-url", url, "--schema", schema}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("migrate", "up")...)
	var ids []string
	for _, key := range []string{"o-1", "o-2", "o-1"} {
		ids = append(ids, strings.TrimSpace(mustCLI(t, with("send", "--topic", "created", "--key", key, "--payload", `{"key":"`+key+`"}`)...)))
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	relayCtx, stopRelay := context.WithCancel(ctx)
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(relayCtx, with("relay", "--publisher", "pubsub://outbox-test/orders?ordering_keys=true", "--poll-interval", "100ms"), &bytes.Buffer{}, &stderr)
	}()
	var ms []*pstest.Message
	for len(ms) < len(ids) && ctx.Err() == nil {
		ms = srv.Messages()
		if len(ms) < len(ids) {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	stopRelay()
	if code := <-done; code != 0 {
		t.Errorf("relay exited with %d: %s", code, stderr.String())
	}
	slices.SortStableFunc(ms, func(a, b *pstest.Message) int { return a.PublishTime.Compare(b.PublishTime) })
	var got, gotO1 []string
	for _, m := range ms {
		if m.Attributes[outboxpubsub.AttrTopic] != "created" || m.OrderingKey != m.Attributes[outboxpubsub.AttrKey] {
			t.Errorf("message %s has attributes %v and ordering key %q; want topic created and the key as ordering key", m.ID, m.Attributes, m.OrderingKey)
		}
		got = append(got, m.Attributes[outboxpubsub.AttrID])
		if m.OrderingKey == "o-1" {
			gotO1 = append(gotO1, m.Attributes[outboxpubsub.AttrID])
		}
	}
	if wantO1 := []string{ids[0], ids[2]}; !slices.Equal(gotO1, wantO1) {
		t.Errorf("topic orders holds key o-1's messages %v, want %v in that order; relay stderr: %s", gotO1, wantO1, stderr.String())
	}
	if len(got) != len(ids) || !slices.Contains(got, ids[1]) {
		t.Fatalf("topic orders holds messages %v, want %v; relay stderr: %s", got, ids, stderr.String())
	}
}

// Not parallel (PUBSUB_EMULATOR_HOST). The relay starts while Pub/Sub does
// not answer: its batches fail until it does.
func TestPubSubPublisherStartsWhilePubSubIsUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	t.Setenv("PUBSUB_EMULATOR_HOST", addr)
	pub, err := openPubSub("pubsub://outbox-test/orders")
	if err != nil {
		t.Fatalf("openPubSub with nothing listening: %v; the relay must start and retry while Pub/Sub is unreachable", err)
	}
	_ = pub.Close()
}

// Not parallel (environment). Credentials the client cannot load fail the
// start with the client's reason, which names where it looked.
func TestRelayRefusesToStartWithoutPubSubCredentials(t *testing.T) {
	t.Setenv("PUBSUB_EMULATOR_HOST", "")
	missing := filepath.Join(t.TempDir(), "no-such-key.json")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", missing)
	code, _, stderr := cli(t, "relay", "--publisher", "pubsub://outbox-test/orders", "--database-url", "postgres://x@127.0.0.1:1/db")
	if code != 1 || !strings.Contains(stderr, "no-such-key.json") {
		t.Fatalf("relay with GOOGLE_APPLICATION_CREDENTIALS=%s: exit %d, stderr %q; want exit 1 naming the file", missing, code, stderr)
	}
}
