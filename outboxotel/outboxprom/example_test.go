package outboxprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxotel/outboxprom"
)

// consumerReady stands for an adapter's Readiness (outboxamqp.Readiness...).
type consumerReady struct{ err error }

func (r *consumerReady) Ready() error { return r.err }

// Serve answers /readyz with what each check checks, and why the consumers
// that do not consume fail it.
func ExampleServe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	billing := &consumerReady{err: errors.New("queue billing not found; declare it")}
	srv, err := outboxprom.Serve(ctx, "127.0.0.1:0", outboxprom.Config{
		Consumers: map[string]outboxotel.Readier{"billing": billing},
	})
	if err != nil {
		panic(err)
	}
	// srv.Observer() goes to Inbox.Observe and ConsumerConfig.Observer.
	readyz := func() {
		resp, err := http.Get("http://" + srv.Addr().String() + "/readyz")
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d %s", resp.StatusCode, body)
	}
	readyz()
	billing.err = nil // the queue declared: the consumer consumes
	readyz()
	// Output:
	// 503 not ready: 1 of 1 check fails
	// billing: FAILING: queue billing not found; declare it (checks: consumer billing is connected and consuming, its adapter's Readiness)
	// 200 ready: 1 check passes
	// billing: ok (checks: consumer billing is connected and consuming, its adapter's Readiness)
}
