package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/go-outbox/outbox"
)

// PublisherFactory opens a destination for one drain run: a fresh stream,
// queue or topic, so runs do not see each other's messages. close releases
// it (and stops an embedded server the factory started).
type PublisherFactory func(ctx context.Context) (pub outbox.Publisher, close func(), err error)

var publisherFactories = struct {
	sync.Mutex
	byName map[string]PublisherFactory
}{byName: map[string]PublisherFactory{
	// noop confirms every message at once: the relay's own ceiling.
	"noop": func(context.Context) (outbox.Publisher, func(), error) {
		return outbox.PublisherFunc(func(_ context.Context, msgs []outbox.Message) []error {
			return make([]error, len(msgs))
		}), func() {}, nil
	},
}}

// RegisterPublisher makes a destination available to the relay drain by
// name (`outbox-bench --publishers name`). Broker packages register theirs
// from files of this package (publisher_<broker>.go), so the measurements
// themselves never change when a broker is added.
func RegisterPublisher(name string, f PublisherFactory) {
	publisherFactories.Lock()
	defer publisherFactories.Unlock()
	publisherFactories.byName[name] = f
}

// Publishers returns the registered destination names, sorted.
func Publishers() []string {
	publisherFactories.Lock()
	defer publisherFactories.Unlock()
	names := make([]string, 0, len(publisherFactories.byName))
	for n := range publisherFactories.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func publisherFactory(name string) (PublisherFactory, error) {
	publisherFactories.Lock()
	defer publisherFactories.Unlock()
	f, ok := publisherFactories.byName[name]
	if !ok {
		names := make([]string, 0, len(publisherFactories.byName))
		for n := range publisherFactories.byName {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("unknown publisher %q; registered: %v", name, names)
	}
	return f, nil
}

// counting wraps a publisher and closes done once target messages were
// confirmed, so a drain ends without polling the table.
type counting struct {
	pub    outbox.Publisher
	n      atomic.Int64
	target int64
	done   chan struct{}
	once   sync.Once
}

// newCounting wraps pub. The wrapper keeps key order if pub does (see
// outbox.KeyOrderKeeper): a relay sends a publisher that does not a batch
// of runs in waves, one message per key per call, and a drain in key order
// must measure the path its publisher takes.
func newCounting(pub outbox.Publisher, target int) outboxCounter {
	c := &counting{pub: pub, target: int64(target), done: make(chan struct{})}
	if _, keeps := pub.(outbox.KeyOrderKeeper); keeps {
		return orderKeepingCounting{c}
	}
	return c
}

// outboxCounter is a counting publisher, keeping key order or not.
type outboxCounter interface {
	outbox.Publisher
	published() int64
	finished() <-chan struct{}
}

// orderKeepingCounting is counting for a publisher that keeps key order.
type orderKeepingCounting struct{ *counting }

func (orderKeepingCounting) KeepsKeyOrder() {}

func (c *counting) published() int64          { return c.n.Load() }
func (c *counting) finished() <-chan struct{} { return c.done }

// Close closes the counted publisher.
func (c *counting) Close() error { return c.pub.Close() }

func (c *counting) Publish(ctx context.Context, msgs []outbox.Message) []error {
	errs := c.pub.Publish(ctx, msgs)
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if c.n.Add(int64(ok)) >= c.target {
		c.once.Do(func() { close(c.done) })
	}
	return errs
}
