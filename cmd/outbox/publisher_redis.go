package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxredis"
)

// redisCheckTimeout bounds the start-up check of the server and stream.
const redisCheckTimeout = 5 * time.Second

// redisPasswordEnv names the environment variable holding the password when
// the URL has none, so it need not appear on a command line.
const redisPasswordEnv = "REDIS_PASSWORD"

// redisTarget is a parsed redis:// (or rediss://) --publisher URL:
//
//	redis://[user:password@]host[:port][/stream][?db=N&stream=S&stream_prefix=P&maxlen=N&max_payload=N&timeout=D]
//
// A path (or ?stream=) names the one stream every message goes to; without
// one, each message goes to the stream named by its topic (after
// stream_prefix). A path of digits is refused: by go-redis's and
// redis-cli's convention it names a database, which is ?db= here.
type redisTarget struct {
	url string // for go-redis: scheme, credentials, host and database
	cfg outboxredis.Config
}

// openRedis builds the publisher for a redis:// or rediss:// --publisher
// URL. The password (from the URL, or REDIS_PASSWORD) is kept out of logs
// and errors. The relay starts while Redis is unreachable (the first batch
// connects); when it answers, refused credentials or a stream key of another
// type fail the start instead of making every batch fail.
func openRedis(raw string) (outbox.Publisher, error) {
	// go-redis writes its own lines (a pool's failed dials, a reconnect)
	// to stderr through a global logger: send them to the relay's log,
	// with any password seen in a URL taken out.
	redis.SetLogger(redisLogger{})
	target, password, err := parseRedisURL(raw)
	secrets.add(password)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	p, err := outboxredis.Open(target.url, target.cfg)
	if err != nil {
		return nil, usagef("--publisher %q: %v", redact(raw), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), redisCheckTimeout)
	defer cancel()
	err = p.Check(ctx)
	switch {
	case errors.Is(err, outboxredis.ErrNotStream):
		_ = p.Close()
		return nil, fmt.Errorf("--publisher: %v", err)
	case errors.Is(err, outboxredis.ErrCheckNotPermitted):
		// The credentials were accepted; a user allowed only XADD publishes.
		slog.Warn("outbox relay: cannot check the Redis server and streams at start with this user; starting anyway", slog.Any("error", err))
	case redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "WRONGPASS"):
		_ = p.Close()
		return nil, fmt.Errorf("the Redis server refused the --publisher credentials (give user:password@ in the URL or %s): %v", redisPasswordEnv, err)
	}
	// Unreachable for now: the relay retries its batches until it is up.
	return p, nil
}

// parseRedisURL parses raw; it returns the password too (from the URL, or
// REDIS_PASSWORD), to be kept out of logs even when the URL is refused.
func parseRedisURL(raw string) (redisTarget, string, error) {
	var t redisTarget
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL: keep only the reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return t, "", fmt.Errorf("use redis://[user:password@]host:6379[/stream] (percent-encode special characters): %v", err)
	}
	password, hasPassword := u.User.Password()
	if !hasPassword {
		if env := os.Getenv(redisPasswordEnv); env != "" {
			password = env
			u.User = url.UserPassword(u.User.Username(), env)
		}
	}
	if s := strings.ToLower(u.Scheme); s != "redis" && s != "rediss" {
		return t, password, fmt.Errorf("use redis:// or rediss://")
	}
	if u.Host == "" {
		return t, password, fmt.Errorf("no server address; use redis://host:6379[/stream]")
	}
	t.cfg.Stream = strings.TrimPrefix(u.Path, "/")
	if _, err := strconv.Atoi(t.cfg.Stream); err == nil {
		// redis://host:6379/2 names database 2 in go-redis and redis-cli:
		// taken as stream "2", the messages would go to database 0.
		return t, password, fmt.Errorf("the path /%s would name a stream, not the database: use ?db=%s for the database; a stream named by digits goes in ?stream=%s", t.cfg.Stream, t.cfg.Stream, t.cfg.Stream)
	}
	db := "0"
	for name, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch name {
		case "db":
			if n, err := strconv.Atoi(v); err != nil || n < 0 {
				return t, password, fmt.Errorf("db=%q: use a database number such as 0", v)
			}
			db = v
		case "max_payload":
			if t.cfg.MaxPayload, err = strconv.Atoi(v); err != nil || t.cfg.MaxPayload <= 0 {
				return t, password, fmt.Errorf("max_payload=%q: use a positive number of bytes", v)
			}
		case "maxlen":
			if t.cfg.MaxLen, err = strconv.ParseInt(v, 10, 64); err != nil || t.cfg.MaxLen <= 0 {
				return t, password, fmt.Errorf("maxlen=%q: use a positive number of entries to keep in each stream", v)
			}
		case "stream":
			if t.cfg.Stream != "" {
				return t, password, fmt.Errorf("a stream in the path and ?stream= exclude each other: give the stream once")
			}
			t.cfg.Stream = v
		case "stream_prefix":
			t.cfg.StreamPrefix = v
		case "timeout":
			if t.cfg.Timeout, err = time.ParseDuration(v); err != nil || t.cfg.Timeout <= 0 {
				return t, password, fmt.Errorf("timeout=%q: use a positive duration such as 10s", v)
			}
		default:
			return t, password, fmt.Errorf("unknown parameter %q; use db, stream, stream_prefix, maxlen, max_payload or timeout", name)
		}
	}
	if err := t.cfg.Validate(); err != nil {
		var ce *outbox.ConfigError
		if errors.As(err, &ce) && ce.Field == "outboxredis.Config.Stream" {
			return t, password, fmt.Errorf("a stream (in the path or ?stream=) and stream_prefix exclude each other: give one stream for every message, or a prefix for per-topic streams")
		}
		return t, password, err
	}
	t.url = (&url.URL{Scheme: strings.ToLower(u.Scheme), User: u.User, Host: u.Host, Path: "/" + db}).String()
	return t, password, nil
}

// redisLogger passes go-redis's lines to slog's default logger (the
// relay's), at WARN level: go-redis logs only what went wrong.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.WarnContext(ctx, "outbox relay: go-redis: "+redact(strings.TrimSpace(fmt.Sprintf(format, v...))))
}
