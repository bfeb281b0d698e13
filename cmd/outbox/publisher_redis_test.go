package main

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

func TestRedisURLNamesStreamDatabaseOptionsAndCredentials(t *testing.T) {
	t.Setenv(redisPasswordEnv, "")
	for _, tc := range []struct {
		raw, url, stream, prefix string
		maxLen                   int64
		maxPayload               int
		timeout                  time.Duration
	}{
		{raw: "redis://r1:6380/ORDERS", url: "redis://r1:6380/0", stream: "ORDERS"},
		{raw: "REDIS://u:p%40ss@r1?db=3&stream_prefix=events:&maxlen=1000&max_payload=65536&timeout=3s",
			url: "redis://u:p%40ss@r1/3", prefix: "events:", maxLen: 1000, maxPayload: 65536, timeout: 3 * time.Second},
		{raw: "rediss://r1/", url: "rediss://r1/0"},
		{raw: "redis://r1?stream=2024&db=2", url: "redis://r1/2", stream: "2024"},
	} {
		got, _, err := parseRedisURL(tc.raw)
		if err != nil {
			t.Errorf("parseRedisURL(%q): %v", tc.raw, err)
			continue
		}
		c := got.cfg
		if got.url != tc.url || c.Stream != tc.stream || c.StreamPrefix != tc.prefix || c.MaxLen != tc.maxLen || c.MaxPayload != tc.maxPayload || c.Timeout != tc.timeout {
			t.Errorf("parseRedisURL(%q) = %s %+v; want %s, stream %q, prefix %q, maxlen %d, max_payload %d, timeout %v",
				tc.raw, got.url, c, tc.url, tc.stream, tc.prefix, tc.maxLen, tc.maxPayload, tc.timeout)
		}
	}
}

// A URL without a password takes REDIS_PASSWORD's, so it need not appear on
// the command line.
func TestRedisPasswordComesFromTheEnvironmentWhenTheURLHasNone(t *testing.T) {
	t.Setenv(redisPasswordEnv, "env-s3cret")
	got, password, err := parseRedisURL("redis://r1/ORDERS")
	if err != nil || password != "env-s3cret" || got.url != "redis://:env-s3cret@r1/0" {
		t.Fatalf("parseRedisURL with %s set = %s, %q, %v; want its password in the client URL", redisPasswordEnv, got.url, password, err)
	}
}

// Not parallel: credentials in a --publisher URL are added to the command's
// list of secrets, which parallel tests read without a lock.
func TestRedisURLErrorsSayWhatToWriteAndHideThePassword(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"redis://", "no server address"},
		{"redis://:s3cret@r1?db=x", "db="},
		{"redis://:s3cret@r1?maxlen=-1", "maxlen="},
		{"redis://:s3cret@r1?max_payload=0", "max_payload="},
		{"redis://:s3cret@r1?timeout=soon", "timeout="},
		{"redis://:s3cret@r1/ORDERS?stream_prefix=p:", "exclude each other"},
		{"redis://:s3cret@r1?acks=all", "unknown parameter"},
		{"redis://:s3cret@r1:6379/2", "use ?db=2 for the database"},
		{"redis://:s3cret@r1/orders?stream=other", "exclude each other"},
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

// The start check: a stream key holding another type fails the start rather
// than failing every batch until an operator reads the log.
func TestRelayRefusesToStartWhenTheStreamKeyIsNotAStream(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t)
	key := redistest.Stream(t, c, "cli.")
	if err := c.Set(context.Background(), key, "a string", 0).Err(); err != nil {
		t.Fatal(err)
	}
	u := strings.TrimSuffix(redistest.URL(t), "/0")
	code, _, stderr := cli(t, "relay", "--publisher", u+"/"+key, "--database-url", "postgres://x@127.0.0.1:1/db")
	if code != 1 || !strings.Contains(stderr, key) || !strings.Contains(stderr, "not a stream") {
		t.Fatalf("relay with stream key %s holding a string: exit %d, stderr %q; want exit 1 naming the key", key, code, stderr)
	}
}

// The relay starts while Redis is down: its batches fail until it is up.
func TestRedisPublisherStartsWhileTheServerIsDown(t *testing.T) {
	t.Parallel()
	pub, err := openRedis(strings.TrimSuffix(redistest.ClosedURL(t), "/0") + "/ORDERS")
	if err != nil {
		t.Fatalf("openRedis with no server listening: %v; the relay must start and retry while Redis is down", err)
	}
	_ = pub.Close()
}

// Not parallel: see TestRedisURLErrorsSayWhatToWriteAndHideThePassword.
func TestRelayPublishesToRedisWithThePasswordFromTheURL(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	srv := redistest.Start(t)
	const password = "pa55-w0rd"
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admin.ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	opts.Password = password
	reader := redis.NewClient(opts)
	t.Cleanup(func() { _ = reader.Close() })

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
	publisher := strings.Replace(strings.TrimSuffix(srv.URL, "/0"), "://", "://:"+password+"@", 1) + "/ORDERS"
	go func() {
		done <- run(relayCtx, with("relay", "--publisher", publisher, "--poll-interval", "100ms", "--log-level", "debug"), &bytes.Buffer{}, &stderr)
	}()

	var xs []redis.XMessage
	for len(xs) < len(ids) && ctx.Err() == nil {
		if xs, err = reader.XRange(ctx, "ORDERS", "-", "+").Result(); err != nil {
			t.Fatalf("XRANGE ORDERS: %v", err)
		}
		if len(xs) < len(ids) {
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
	// Key o-1's two messages must arrive in the order they were sent; o-2's
	// may come anywhere around them.
	var got, gotO1 []string
	for _, x := range xs {
		if x.Values[outboxredis.FieldTopic] != "created" {
			t.Errorf("entry %s has topic %v, want created", x.ID, x.Values[outboxredis.FieldTopic])
		}
		got = append(got, x.Values[outboxredis.FieldID].(string))
		if x.Values[outboxredis.FieldKey] == "o-1" {
			gotO1 = append(gotO1, x.Values[outboxredis.FieldID].(string))
		}
	}
	if wantO1 := []string{ids[0], ids[2]}; !slices.Equal(gotO1, wantO1) {
		t.Errorf("stream ORDERS holds key o-1's messages %v, want %v in that order; relay stderr: %s", gotO1, wantO1, stderr.String())
	}
	if len(got) != len(ids) || !slices.Contains(got, ids[1]) {
		t.Fatalf("stream ORDERS holds messages %v, want %v; relay stderr: %s", got, ids, stderr.String())
	}
	if strings.Contains(stderr.String(), password) {
		t.Fatalf("the relay logged the password: %s", stderr.String())
	}
}

// Not parallel: see TestRedisURLErrorsSayWhatToWriteAndHideThePassword.
func TestRelayRefusesToStartWithAPasswordRedisRefusesAndDoesNotPrintIt(t *testing.T) {
	srv := redistest.Start(t)
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.ConfigSet(context.Background(), "requirepass", "right-pw").Err(); err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSuffix(srv.URL, "/0")
	for _, userinfo := range []string{"", ":wr0ng-pw@"} {
		publisher := strings.Replace(base, "://", "://"+userinfo, 1) + "/ORDERS"
		code, _, stderr := cli(t, "relay", "--publisher", publisher, "--database-url", "postgres://x@127.0.0.1:1/db")
		if code != 1 || !strings.Contains(stderr, "refused the --publisher credentials") {
			t.Errorf("relay with password %q refused: exit %d, stderr %q; want exit 1 saying so", userinfo, code, stderr)
		}
		if strings.Contains(stderr, "wr0ng-pw") {
			t.Errorf("relay printed the password: %q", stderr)
		}
	}
}

// A user allowed only XADD on the stream cannot run the start check (PING,
// TYPE): that is no refused password, and the relay starts anyway.
// Not parallel: see TestRedisURLErrorsSayWhatToWriteAndHideThePassword.
func TestRelayStartsWithAUserAllowedOnlyXAdd(t *testing.T) {
	c := redistest.Client(t)
	stream := redistest.Stream(t, c, "cli.")
	user := "cli-xadd-only-" + stream[strings.LastIndex(stream, ".")+1:]
	if err := c.Do(context.Background(), "ACL", "SETUSER", user, "on", ">xadd-pw", "~"+stream, "+xadd").Err(); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	t.Cleanup(func() { _ = c.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	u := strings.Replace(strings.TrimSuffix(redistest.URL(t), "/0"), "://", "://"+user+":xadd-pw@", 1) + "/" + stream
	pub, err := openRedis(u)
	if err != nil {
		t.Fatalf("openRedis as a user allowed only XADD: %v; want the relay to start", err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := pub.Publish(ctx, publishertest.Messages("created", 1))[0]; err != nil {
		t.Fatalf("publish as a user allowed only XADD: %v", err)
	}
}

// go-redis's own lines reach the relay's log, without the password.
func TestGoRedisLinesGoToTheRelaysLogWithoutThePassword(t *testing.T) {
	// Locked: go-redis goroutines of earlier tests may log through the
	// default meanwhile.
	var buf clitest.LockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	rememberSecret("redis://user:s3cret-pw@127.0.0.1:1/stream")
	redisLogger{}.Printf(context.Background(), "redis: dial %s: %s", "redis://user:s3cret-pw@127.0.0.1:1", "connection refused")
	line := buf.String()
	if !strings.Contains(line, "go-redis: redis: dial") || !strings.Contains(line, "level=WARN") {
		t.Fatalf("log line %q; want go-redis's line at WARN level", line)
	}
	if strings.Contains(line, "s3cret-pw") {
		t.Fatalf("log line %q shows the password", line)
	}
}
