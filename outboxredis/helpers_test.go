package outboxredis_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
	"github.com/go-outbox/outbox/publishertest"
)

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// open returns a publisher with a client of its own for url, closed when the
// test ends.
func open(t *testing.T, url string, cfg outboxredis.Config) *outboxredis.Publisher {
	t.Helper()
	p, err := outboxredis.Open(url, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// entries reads stream back from the first entry with XRANGE.
func entries(t *testing.T, c redis.UniversalClient, stream string) []redis.XMessage {
	t.Helper()
	xs, err := c.XRange(ctxFor(t, 10*time.Second), stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	return xs
}

// receiver reads stream with XRANGE from after the last entry it returned,
// polling until n entries are there or ctx ends.
func receiver(c redis.UniversalClient, stream string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	after := "-"
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		var got []publishertest.Received
		for len(got) < n {
			xs, err := c.XRangeN(ctx, stream, after, "+", int64(n-len(got))).Result()
			if err != nil {
				return got, fmt.Errorf("XRANGE %s: %w (%d of %d entries read)", stream, err, len(got), n)
			}
			for _, x := range xs {
				got = append(got, received(x))
				after = "(" + x.ID
			}
			if len(xs) == 0 {
				select {
				case <-ctx.Done():
					return got, fmt.Errorf("%d of %d entries in %s: %w", len(got), n, stream, ctx.Err())
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		return got, nil
	}
}

func received(x redis.XMessage) publishertest.Received {
	str := func(name string) string { s, _ := x.Values[name].(string); return s }
	r := publishertest.Received{
		ID: str(outboxredis.FieldID), Topic: str(outboxredis.FieldTopic), Key: str(outboxredis.FieldKey),
		Payload: []byte(str(outboxredis.FieldPayload)), Headers: map[string]string{},
	}
	for name, v := range x.Values {
		if h, ok := strings.CutPrefix(name, outboxredis.HeaderFieldPrefix); ok {
			r.Headers[h], _ = v.(string)
		}
	}
	return r
}

// client is the shared test server's client and a stream of the test's own.
func client(t *testing.T) (*redis.Client, string) {
	c := redistest.Client(t)
	return c, redistest.Stream(t, c, "outboxredis.")
}
