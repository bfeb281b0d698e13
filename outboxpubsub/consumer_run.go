package outboxpubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/internal/loglimit"
)

const (
	// shutdownTimeout bounds how long Receive, once Consume's context
	// ended, spends handing back (nacking) the messages it holds.
	shutdownTimeout = 5 * time.Second
	// checkTimeout bounds the check of the subscription before Receive,
	// its retries included: Pub/Sub that has not answered by then counts as
	// unreachable (the client's own retries would go on for a minute).
	checkTimeout = 10 * time.Second
	// receiveSettle is how long Receive runs without an error, or until a
	// message comes, before the consumer counts as receiving: the client
	// tells nothing when its stream is open, and a refusal (a missing
	// subscription, a permission) comes within a round trip.
	receiveSettle = time.Second
)

// errClosed is what Consume returns when the client is closed.
var errClosed = errors.New("outboxpubsub: consumer: the Pub/Sub client is closed, so nothing more can be received with it; make a new client and call Consume again")

// consumer is Consume's state: it checks the subscription, receives from it
// until receiving stops, and decides whether to try again or give up.
type consumer struct {
	cfg          ConsumerConfig
	client       *pubsub.Client
	fn           func(context.Context, outbox.Message) error
	lanesCfg     consume.Config
	log          *slog.Logger
	parkPub      *pubsub.Publisher // of ParkTopic; nil without one
	ready        *consume.Readiness
	subscription string // full name

	// mayCheck is false once Pub/Sub refused a read of the subscription:
	// the credentials may consume without leave to read it.
	mayCheck atomic.Bool
	// operatorLog bounds the ERROR lines of a failure only an operator
	// fixes; renewed when receiving works again, so that the next failure
	// is logged at once.
	operatorLog atomic.Pointer[loglimit.Limiter]
	// unreachableLog bounds the WARN lines of an unreachable Pub/Sub,
	// which may come and go many times a minute.
	unreachableLog loglimit.Limiter

	mu                sync.Mutex
	failing           bool // a failure was logged: say when receiving works again
	unreachable       bool // the probe found Pub/Sub unreachable while receiving
	unreachableLogged bool // and said so at WARN level: say when it answers again
	wait              *backoff.Backoff
}

func newConsumer(client *pubsub.Client, cfg ConsumerConfig, fn func(context.Context, outbox.Message) error) *consumer {
	sub := cfg.Subscription
	if !strings.Contains(sub, "/") {
		sub = "projects/" + client.Project() + "/subscriptions/" + sub
	}
	c := &consumer{
		cfg: cfg, client: client, fn: fn, subscription: sub, ready: cfg.Readiness.state(),
		log:  cfg.Logger.With(slog.String("consumer", cfg.Name), slog.String("subscription", sub)),
		wait: backoff.NewJittered(cfg.BackoffBase, cfg.BackoffMax),
		lanesCfg: consume.Config{
			Consumer: cfg.Name, Concurrency: cfg.Concurrency, MaxDeliver: cfg.MaxDeliver,
			BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax, Logger: cfg.Logger, Observer: cfg.Observer, Parked: cfg.Parked,
			SkipParkedInKeyOrder: cfg.SkipParkedInKeyOrder,
			// As many as Receive's MaxOutstandingMessages; the client
			// may hand over more (see MaxOutstandingPerWorker), and Submit
			// then waits.
			MaxHeld: cfg.Concurrency * MaxOutstandingPerWorker,
		},
	}
	if cfg.ParkTopic != "" {
		c.parkPub = client.Publisher(cfg.ParkTopic)
	}
	c.mayCheck.Store(true)
	c.operatorLog.Store(&loglimit.Limiter{Interval: ConfigErrorLogInterval})
	c.unreachableLog.Interval = ConfigErrorLogInterval
	return c
}

// close stops the park topic's publisher, which sends what it holds.
func (c *consumer) close() {
	if c.parkPub != nil {
		c.parkPub.Stop()
	}
}

// run receives until ctx ends (then it returns nil) or the client is
// closed (then it returns why).
func (c *consumer) run(ctx context.Context) error {
	for {
		err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if isClosed(err) {
			return fmt.Errorf("%w: %w", errClosed, err)
		}
		c.ready.Failed(c.notConsuming(err))
		c.mu.Lock()
		c.failing = true
		c.mu.Unlock()
		c.logFailure(err, c.wait.Next())
		if !c.wait.Sleep(ctx, nil) {
			return nil
		}
	}
}

// session checks the subscription and receives from it until Receive
// returns, reading the subscription meanwhile to tell whether Pub/Sub
// answers (watch). The messages it handed to its lanes are acknowledged
// through this Receive only: when it returns, the lanes stop and drop what
// they hold (Receive nacked it), and the next session gets it again.
func (c *consumer) session(ctx context.Context) error {
	if err := c.check(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.unreachable, c.unreachableLogged = false, false
	c.mu.Unlock()
	sctx, cancel := context.WithCancelCause(ctx)
	lanes := consume.Start(sctx, c.lanesCfg, c.fn)
	var probing sync.WaitGroup
	probing.Go(func() { c.watch(sctx, cancel) })
	var once sync.Once
	up := func() { once.Do(c.receiving) }
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		t := time.NewTimer(receiveSettle)
		defer t.Stop()
		select {
		case <-t.C:
			up()
		case <-sctx.Done():
		}
	}()
	sub := c.client.Subscriber(c.subscription)
	sub.ReceiveSettings.MaxOutstandingMessages = c.lanesCfg.MaxHeld
	// Without it Receive waits, once its context ends, until every message
	// handed over is acknowledged or its lease runs out (MaxExtension, an
	// hour); nacked, the messages go to another process at once.
	sub.ReceiveSettings.ShutdownOptions = &pubsub.ShutdownOptions{Behavior: pubsub.ShutdownBehaviorNackImmediately, Timeout: shutdownTimeout}
	err := sub.Receive(sctx, func(_ context.Context, msg *pubsub.Message) {
		up()
		c.answered()
		c.receive(sctx, lanes, msg)
	})
	if err == nil && ctx.Err() == nil {
		err = context.Cause(sctx) // the probe's, when it ended the session
		if err == nil {
			err = errors.New("receiving stopped")
		}
	}
	cancel(nil)
	<-settled
	probing.Wait()
	lanes.Close()
	return err
}

// receiving says receiving works: readiness, the backoff and the ERROR
// logs' limit start over, and a failure logged before is said to be over.
func (c *consumer) receiving() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wait.Reset()
	c.ready.Consuming()
	if c.failing {
		c.failing = false
		c.operatorLog.Store(&loglimit.Limiter{Interval: ConfigErrorLogInterval})
		c.log.Info("outboxpubsub: consumer is back: receiving again")
	}
}

// receive hands msg to the lanes. A message that is no outbox message is
// parked at once; one the lanes cannot take (the session is ending) is
// handed back.
func (c *consumer) receive(ctx context.Context, lanes *consume.Lanes, msg *pubsub.Message) {
	m, err := FromMessage(msg)
	if err != nil {
		c.log.Error("outboxpubsub: message parked: not an outbox message", slog.String("pubsub_message_id", msg.ID), slog.Any("error", err))
		if err := c.park(ctx, msg, "not an outbox message: "+err.Error()); err != nil && ctx.Err() == nil {
			c.log.Warn("outboxpubsub: acknowledging a parked message failed; it will come again", slog.String("pubsub_message_id", msg.ID), slog.Any("error", err))
		}
		return
	}
	if !lanes.Submit(ctx, &delivery{c: c, msg: msg, m: m}) {
		msg.Nack()
	}
}

// check reads the subscription, so that a missing one is reported with
// its fix rather than as Receive's bare NOT_FOUND, and an unreachable
// Pub/Sub as such rather than not at all. Credentials refused the read
// (roles/pubsub.subscriber does not grant pubsub.subscriptions.get) skip
// it from then on: Receive tells whether they may consume.
func (c *consumer) check(ctx context.Context) error {
	if !c.mayCheck.Load() {
		return nil
	}
	err := c.readSubscription(ctx, checkTimeout)
	if status.Code(err) == codes.PermissionDenied {
		c.mayNotCheck(err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("check the subscription: %w", err)
	}
	return nil
}

// isClosed reports whether err says the client is closed.
func isClosed(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Canceled && strings.Contains(s.Message(), "client connection is closing")
}

// logFailure logs why receiving stopped: at ERROR level (bounded) what an
// operator must fix, at WARN level what passes by itself.
func (c *consumer) logFailure(err error, retryIn time.Duration) {
	retry := slog.Duration("retry_in", retryIn)
	var unreachable *unreachableError
	if errors.As(err, &unreachable) {
		if c.unreachableLog.Allow("unreachable") {
			c.log.Warn("outboxpubsub: consumer cannot reach Pub/Sub; trying again", retry, slog.Any("error", unreachable))
			return
		}
		c.log.Debug("outboxpubsub: consumer still cannot reach Pub/Sub (logged at WARN level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", unreachable))
		return
	}
	if fix := c.operatorFix(err); fix != "" {
		if c.operatorLog.Load().Allow(fix) {
			c.log.Error("outboxpubsub: consumer cannot receive until the configuration is fixed", slog.String("fix", fix), retry, slog.Any("error", err))
			return
		}
		c.log.Debug("outboxpubsub: consumer still cannot receive (logged at ERROR level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", err))
		return
	}
	c.log.Warn("outboxpubsub: consumer stopped receiving; starting again (Pub/Sub delivers again what was not acknowledged)", retry, slog.Any("error", err))
}

// notConsuming is why the consumer is not ready after receiving stopped
// with err.
func (c *consumer) notConsuming(err error) error {
	var unreachable *unreachableError
	if errors.As(err, &unreachable) {
		return unreachable
	}
	if fix := c.operatorFix(err); fix != "" {
		return fmt.Errorf("%s: %w", fix, err)
	}
	return fmt.Errorf("receiving stopped; starting again: %w", err)
}

// operatorFix is what an operator must do about err, or "" if it passes by
// itself.
func (c *consumer) operatorFix(err error) string {
	switch status.Code(err) {
	case codes.NotFound:
		return fmt.Sprintf("subscription %s not found: create it (gcloud pubsub subscriptions create %s --project %s --topic TOPIC --enable-message-ordering, the last for key order), consuming starts once it exists",
			c.subscription, topicID(c.subscription), projectOf(c.subscription))
	case codes.PermissionDenied:
		return fmt.Sprintf("grant the consumer's credentials roles/pubsub.subscriber on subscription %s", c.subscription)
	case codes.Unauthenticated:
		return "check the credentials (GOOGLE_APPLICATION_CREDENTIALS or the metadata server's service account)"
	}
	return ""
}
