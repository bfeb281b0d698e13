package outboxpubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// probeInterval is how often the consumer reads its subscription while
	// it receives. The client retries an unreachable Pub/Sub inside Receive
	// without a word, and a quiet subscription looks the same from there:
	// only an answer to a request of the consumer's own tells them apart.
	// Every few seconds notices an outage about as soon as the other
	// adapters do (Kafka checks every 10 s), at a dozen small reads a minute
	// per process.
	probeInterval = 5 * time.Second
	// probeTimeout bounds one read, its retries included. A read takes a
	// round trip, a new connection's handshake a few more; a Pub/Sub that
	// has not answered within probeTimeout counts as unreachable, and an
	// outage shorter than it passes unnoticed.
	probeTimeout = 3 * time.Second
)

// unreachableError says that Pub/Sub did not answer a read of the
// subscription: the connection failed (UNAVAILABLE) each time the client
// tried, or no answer came within the time given.
type unreachableError struct {
	cause  error // the last failure the client retried, else the read's own error
	within time.Duration
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("Pub/Sub unreachable: no answer within %v: %v", e.within, e.cause)
}

func (e *unreachableError) Unwrap() error { return e.cause }

// lastFailure is a gax.Retryer that remembers the last failure it was asked
// about: once the read's time is up, gax returns the bare deadline, and the
// failure before it (a refused connection, a name that does not resolve) is
// the cause worth reporting.
type lastFailure struct {
	gax.Retryer
	err error
}

func (r *lastFailure) Retry(err error) (time.Duration, bool) {
	r.err = err
	return r.Retryer.Retry(err)
}

// readSubscription reads the subscription within timeout, retrying what the
// client's default retries (UNAVAILABLE, UNKNOWN, ABORTED) with a backoff
// short enough for a few tries. An error saying Pub/Sub did not answer is
// an *unreachableError.
func (c *consumer) readSubscription(ctx context.Context, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := &lastFailure{Retryer: gax.OnCodes([]codes.Code{codes.Unavailable, codes.Unknown, codes.Aborted},
		gax.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 1.5})}
	_, err := c.client.SubscriptionAdminClient.GetSubscription(rctx, &pubsubpb.GetSubscriptionRequest{Subscription: c.subscription},
		gax.WithRetry(func() gax.Retryer { return r }))
	if err == nil || ctx.Err() != nil {
		return err
	}
	if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) {
		cause := err
		if r.err != nil && status.Code(err) != codes.Unavailable {
			cause = r.err
		}
		return &unreachableError{cause: cause, within: timeout}
	}
	return err
}

// watch reads the subscription every probeInterval until ctx ends, to tell
// whether Pub/Sub answers: see probeInterval. It stops once the credentials
// may not read the subscription.
func (c *consumer) watch(ctx context.Context, endSession context.CancelCauseFunc) {
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for c.mayCheck.Load() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := c.readSubscription(ctx, probeTimeout)
		var unreachable *unreachableError
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &unreachable):
			c.cutOff(unreachable)
		case status.Code(err) == codes.PermissionDenied:
			c.mayNotCheck(err)
			c.answered()
		case status.Code(err) == codes.NotFound:
			// Deleted while receiving: Receive may keep its stream
			// open and get nothing, ready all the while. The next
			// session's check reports it with the fix, and waits for it.
			c.answered()
			endSession(fmt.Errorf("the subscription is gone: %w", err))
			return
		default:
			// Any other answer tells that Pub/Sub is reachable.
			c.answered()
		}
	}
}

// cutOff says that Pub/Sub did not answer: readiness fails, and a WARN line
// says so once per outage (at most once per ConfigErrorLogInterval while
// Pub/Sub comes and goes).
func (c *consumer) cutOff(err *unreachableError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready.Failed(err)
	if c.unreachable {
		c.log.Debug("outboxpubsub: consumer still cannot reach Pub/Sub", slog.Any("error", err))
		return
	}
	c.unreachable = true
	if !c.unreachableLog.Allow("unreachable") {
		c.log.Debug("outboxpubsub: consumer cannot reach Pub/Sub (logged at WARN level at most once per ConfigErrorLogInterval)", slog.Any("error", err))
		return
	}
	c.unreachableLogged = true
	c.log.Warn("outboxpubsub: consumer cannot reach Pub/Sub; the client keeps trying, and what it holds is handled meanwhile (a message whose acknowledgement does not get through comes again, and the inbox skips it)",
		slog.Any("error", err))
}

// answered says that Pub/Sub answered (a read, or a message came): after
// cutOff, readiness is nil again and an INFO line says receiving resumes.
// The client opens its stream again on its own backoff (up to 30 s between
// tries), which the consumer cannot see on a quiet subscription: an answer
// is the sign that it can.
func (c *consumer) answered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.unreachable {
		return
	}
	c.unreachable = false
	c.ready.Consuming()
	if c.unreachableLogged {
		c.unreachableLogged = false
		c.log.Info("outboxpubsub: consumer is back: Pub/Sub answers again, receiving resumes (the client opens its stream again within its backoff, usually 30 s at most)")
	}
}

// mayNotCheck stops the checks and the probe: the credentials may consume
// without leave to read the subscription (roles/pubsub.subscriber does not
// grant pubsub.subscriptions.get).
func (c *consumer) mayNotCheck(err error) {
	if !c.mayCheck.Swap(false) {
		return
	}
	c.log.Info("outboxpubsub: consumer may not read the subscription (pubsub.subscriptions.get, which roles/pubsub.subscriber does not grant): receiving without checking it, so an unreachable Pub/Sub goes unnoticed (grant roles/pubsub.viewer on the subscription to have it noticed)",
		slog.Any("error", err))
}
