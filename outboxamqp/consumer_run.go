package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// errCancelled says the broker ended the consumer while its channel stayed
// open (basic.cancel): the queue was deleted, or the node holding it failed.
var errCancelled = errors.New("the broker cancelled the consumer")

// consumeOnce consumes on one connection until it fails or ctx ends;
// connected is called once the consumer is registered.
func consumeOnce(ctx context.Context, url string, cfg ConsumerConfig, lanesCfg consume.Config, log *slog.Logger, fn func(context.Context, outbox.Message) error, connected func()) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	// A deleted queue cancels the consumer but leaves the channel open: the
	// deliveries end and no close ever comes.
	cancelled := ch.NotifyCancel(make(chan string, 1))
	// Not ctx: when it ends, amqp091 would cancel the consumer (basic.cancel)
	// while its unacknowledged messages stay with this channel until the
	// connection closes. On a single-active-consumer queue the broker then
	// activates the standby at once, which gets the key's later messages
	// before these come back: closing the connection returns them first.
	deliveries, err := ch.ConsumeWithContext(context.WithoutCancel(ctx), cfg.Queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume queue %s: %w", cfg.Queue, err)
	}
	connected()
	// Once this channel is gone, what the lanes hold can no longer be
	// acknowledged (the broker requeues it): cancel their context, which
	// ends the pauses between attempts and the handlers that heed it, or a
	// message waiting for an unavailable destination, which counts no
	// attempt, would keep the consumer from connecting again, and every
	// other key with it (a handler that ignores its context is still waited
	// for). Deferred after Close, so it runs first.
	lanesCtx, stopLanes := context.WithCancel(ctx)
	lanes := consume.Start(lanesCtx, lanesCfg, fn)
	defer lanes.Close()
	defer stopLanes()
	for {
		select {
		case <-ctx.Done():
			return nil
		case d, ok := <-deliveries:
			if !ok {
				select {
				case _, ok := <-cancelled:
					if ok {
						return fmt.Errorf("%w of queue %s", errCancelled, cfg.Queue)
					}
					// amqp091 closes the notifications with the channel:
					// no cancel came, the channel closed, and closed says
					// why (or is closed too).
					return fmt.Errorf("the broker closed the channel: %v", <-closed)
				case err := <-closed:
					return fmt.Errorf("the broker closed the channel: %v", err)
				case <-ctx.Done():
					return nil
				}
			}
			m, err := FromDelivery(d)
			if err != nil {
				log.Error("outboxamqp: message parked: not an outbox message", slog.Any("error", err))
				_ = d.Nack(false, false)
				continue
			}
			if !lanes.Submit(ctx, &delivery{d: d, m: m}) {
				return nil
			}
		}
	}
}

// failureLog logs why consuming stopped: at ERROR level, at most once per
// ConfigErrorLogInterval, what only an operator fixes; at WARN level what
// passes by itself (a dropped connection, a restarting broker); and at INFO
// level that consuming resumed after either.
type failureLog struct {
	failing  bool // a failure was logged: say when consuming resumes
	log      *slog.Logger
	operator *loglimit.Limiter
	queue    string
}

func newFailureLog(log *slog.Logger, queue string) *failureLog {
	return &failureLog{log: log, operator: &loglimit.Limiter{Interval: ConfigErrorLogInterval}, queue: queue}
}

// back logs that consuming resumed, if it had stopped.
func (f *failureLog) back() {
	if !f.failing {
		return
	}
	f.failing = false
	// The next failure is a new one: log it at once.
	f.operator = &loglimit.Limiter{Interval: ConfigErrorLogInterval}
	f.log.Info("outboxamqp: consumer is back: consuming again")
}

// failed logs err, after which Consume tries again in retryIn.
func (f *failureLog) failed(err error, retryIn time.Duration) {
	f.failing = true
	retry := slog.Duration("retry_in", retryIn)
	kind, fix := operatorFix(f.queue, err)
	switch {
	case kind == "":
		f.log.Warn("outboxamqp: consumer lost its connection; connecting again (the broker requeues what was not acknowledged)", retry, slog.Any("error", err))
	case f.operator.Allow(kind):
		f.log.Error("outboxamqp: consumer cannot read: "+fix, retry, slog.Any("error", err))
	default:
		f.log.Debug("outboxamqp: consumer still cannot read (logged at ERROR level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", err))
	}
}

// notConsuming is why a consumer whose consumeOnce failed with err is not
// ready: the operator's fix, or that it is connecting again.
func notConsuming(queue string, err error) error {
	if kind, fix := operatorFix(queue, err); kind != "" {
		return fmt.Errorf("%s: %w", fix, err)
	}
	return fmt.Errorf("lost its connection, connecting again: %w", err)
}

// operatorFix returns the kind of a failure only an operator fixes and the
// fix, or "" for a failure that passes by itself.
func operatorFix(queue string, err error) (kind, fix string) {
	var amqpErr *amqp.Error
	switch {
	case errors.Is(err, errCancelled):
		return "queue", fmt.Sprintf("the broker cancelled the consumer: queue %s was deleted (or the node holding it failed); declare it again and bind it to the exchange the relay publishes to, consuming resumes once it exists", queue)
	case errors.Is(err, amqp.ErrCredentials):
		return "credentials", "the broker refused the credentials in the URL; fix the user name or password"
	case errors.Is(err, amqp.ErrVhost):
		return "vhost", "the broker refused the virtual host in the URL; create it or give the user access to it"
	case errors.Is(err, amqp.ErrSASL):
		return "sasl", "the broker offers no authentication mechanism the client supports; enable PLAIN or AMQPLAIN on the broker"
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound:
		return "queue", fmt.Sprintf("queue %s not found; declare it and bind it to the exchange the relay publishes to, consuming starts once it exists", queue)
	case errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused:
		return "access", fmt.Sprintf("the broker refused access to queue %s: give the user read permission on it, or stop the exclusive consumer that holds it", queue)
	}
	return "", ""
}
