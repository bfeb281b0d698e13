package outboxpubsub_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/go-outbox/outbox/outboxpubsub"
	"github.com/go-outbox/outbox/publishertest"
)

const project = "outbox-test"

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// reactor answers the fake's Publish or GetTopic: an error fails the call,
// nil lets the fake handle it.
type reactor func(req any) error

func (f reactor) React(req any) (bool, any, error) {
	if err := f(req); err != nil {
		return true, nil, err
	}
	return false, nil, nil
}

// server starts a fake Pub/Sub of the test's own, with reactors on Publish
// (onPublish) if not nil.
func server(t *testing.T, onPublish reactor) *pstest.Server {
	t.Helper()
	var opts []pstest.ServerReactorOption
	if onPublish != nil {
		opts = append(opts, pstest.ServerReactorOption{FuncName: "Publish", Reactor: onPublish})
	}
	srv := pstest.NewServer(opts...)
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// clientOptions point a client at addr without credentials.
func clientOptions(addr string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// open returns a publisher with a client of its own for the fake at addr,
// closed when the test ends.
func open(t *testing.T, addr, url string, cfg outboxpubsub.Config) *outboxpubsub.Publisher {
	t.Helper()
	p, err := outboxpubsub.Open(ctxFor(t, 10*time.Second), url, cfg, clientOptions(addr)...)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// createTopic creates topic (an id) on the fake.
func createTopic(t *testing.T, srv *pstest.Server, topic string) {
	t.Helper()
	c, err := pubsub.NewClient(ctxFor(t, 10*time.Second), project, clientOptions(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.TopicAdminClient.CreateTopic(ctxFor(t, 10*time.Second), &pubsubpb.Topic{Name: fullName(topic)}); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

func fullName(topic string) string { return "projects/" + project + "/topics/" + topic }

// stored returns the messages the fake stored for topic, in publish order.
func stored(srv *pstest.Server, topic string) []*pstest.Message {
	var out []*pstest.Message
	for _, m := range srv.Messages() {
		if m.Topic == fullName(topic) {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b *pstest.Message) int { return a.PublishTime.Compare(b.PublishTime) })
	return out
}

// receiver reads what the fake stored for topic, from after the last message
// it returned, polling until n are there or ctx ends.
func receiver(srv *pstest.Server, topic string) func(ctx context.Context, n int) ([]publishertest.Received, error) {
	seen := 0
	return func(ctx context.Context, n int) ([]publishertest.Received, error) {
		for {
			ms := stored(srv, topic)
			if len(ms)-seen >= n {
				var got []publishertest.Received
				for _, m := range ms[seen : seen+n] {
					got = append(got, received(m))
				}
				seen += n
				return got, nil
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

func received(m *pstest.Message) publishertest.Received {
	r := publishertest.Received{
		ID: m.Attributes[outboxpubsub.AttrID], Topic: m.Attributes[outboxpubsub.AttrTopic],
		Key: m.Attributes[outboxpubsub.AttrKey], Payload: m.Data, Headers: map[string]string{},
	}
	for k, v := range m.Attributes {
		r.Headers[k] = v
	}
	return r
}

// closedAddr returns an address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
