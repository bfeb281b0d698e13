package bench

// Side-by-side benchmarks of the broker publishers (issue 28): each
// publishes the same batches as a bare client of the same library, sending
// the same entries and waiting for the same confirmation, against an
// emulator or a real server. The two alternate within each iteration, so
// the load of this shared machine falls on both alike: the ratio is the
// figure, the absolute rates are those of an emulator on a busy machine.
// docs/benchmarks.md gives the command.

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

const (
	// sideBatch is the messages per call: the relay's default batch.
	sideBatch = 100
	// sidePayload is the payload size, the drain benchmarks' own.
	sidePayload = 256
	// sideKeys is how many keys the messages spread over.
	sideKeys = 64
	// sideTimeout bounds one call; a call that takes longer is a fault,
	// not a figure.
	sideTimeout = 30 * time.Second
)

// sideBySide is one comparison: publisher and bare each send the whole
// batch and return when every message is confirmed, or with the first
// failure. clear, if not nil, empties the destination between iterations,
// untimed, every clearEvery iterations, so that a long run does not measure
// a growing stream or queue, nor fill the server's memory.
type sideBySide struct {
	bare       func(ctx context.Context, msgs []outbox.Message) error
	clear      func(ctx context.Context) error
	clearEvery int
	publisher  func(ctx context.Context, msgs []outbox.Message) error
}

// run times b.N batches through each side, alternating which goes first,
// and reports the median time per message of each side's batches and the
// median of the paired ratios, publisher over bare in the same iteration
// (1.10 means the publisher takes 10% longer). Medians and pairs, not
// sums: on a shared machine a burst of load lands on a few batches, and
// alike on both sides of a pair. ns/op is both sides together and means
// nothing alone.
func (s sideBySide) run(b *testing.B) {
	b.Helper()
	ctx := context.Background()
	call := func(name string, f func(context.Context, []outbox.Message) error, msgs []outbox.Message) time.Duration {
		cctx, cancel := context.WithTimeout(ctx, sideTimeout)
		defer cancel()
		start := time.Now()
		err := f(cctx, msgs)
		d := time.Since(start)
		if err != nil {
			b.Fatalf("%s: %v", name, err)
		}
		return d
	}
	// One untimed batch each first: connections, the client's per-topic
	// publishers and the destination are set up outside the figures.
	call("publisher (warm-up)", s.publisher, sideMessages())
	call("bare client (warm-up)", s.bare, sideMessages())
	pub := make([]float64, 0, b.N)
	bare := make([]float64, 0, b.N)
	ratios := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		if s.clear != nil && i > 0 && i%max(s.clearEvery, 1) == 0 {
			b.StopTimer()
			if err := s.clear(ctx); err != nil {
				b.Fatalf("clear the destination: %v", err)
			}
			b.StartTimer()
		}
		msgs := sideMessages()
		var p, c time.Duration
		if i%2 == 0 {
			p = call("publisher", s.publisher, msgs)
			c = call("bare client", s.bare, msgs)
		} else {
			c = call("bare client", s.bare, msgs)
			p = call("publisher", s.publisher, msgs)
		}
		pub = append(pub, float64(p.Nanoseconds())/sideBatch)
		bare = append(bare, float64(c.Nanoseconds())/sideBatch)
		ratios = append(ratios, float64(p)/float64(c))
	}
	b.StopTimer()
	b.ReportMetric(median(pub), "publisher-ns/msg")
	b.ReportMetric(median(bare), "bare-ns/msg")
	b.ReportMetric(median(ratios), "ratio")
}

// sideMessages returns one batch of fresh messages as a Writer makes them:
// an id, a topic, one of sideKeys keys, a payload of sidePayload bytes.
func sideMessages() []outbox.Message {
	payload := make([]byte, sidePayload)
	for i := range payload {
		payload[i] = 'x'
	}
	msgs := make([]outbox.Message, sideBatch)
	for i := range msgs {
		msgs[i] = outbox.Message{
			ID: uuid.New(), Topic: "bench", Key: "key-" + strconv.Itoa(i%sideKeys),
			Payload: payload, CreatedAt: time.Now(),
		}
	}
	return msgs
}

// firstError returns the first failure of a Publish call, naming the
// message, or nil when every message was confirmed.
func firstError(msgs []outbox.Message, errs []error) error {
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("message %d (%s): %w", i, msgs[i].ID, err)
		}
	}
	return nil
}
