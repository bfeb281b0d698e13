package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// reader keeps Consume's durable consumer read: it creates the consumer,
// reads it until the read breaks, and decides whether to create it again,
// wait for an operator, or give up.
type reader struct {
	cfg ConsumerConfig
	js  jetstream.JetStream
	log *slog.Logger

	// operatorLog bounds the ERROR lines of a failure only an operator
	// fixes; it is renewed when consuming resumes, so that the next
	// failure is logged at once.
	operatorLog loglimit.Limiter
	// ready is told what the logs tell: the consumer is ready while its
	// read runs and its connection is up, which the read and the
	// connection's watcher change from two goroutines, under stateMu.
	ready    *consume.Readiness
	stateMu  sync.Mutex
	reading  bool
	connLost bool
}

// readState changes, under stateMu, whether the read runs and whether the
// connection is lost, with why not ready (nil if the change cannot make the
// consumer unready), and tells ready.
func (r *reader) readState(change func(), why error) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	change()
	if r.reading && !r.connLost {
		r.ready.Consuming()
	} else {
		r.ready.Failed(why)
	}
}

func newReader(js jetstream.JetStream, cfg ConsumerConfig) *reader {
	return &reader{
		cfg:         cfg,
		js:          js,
		log:         cfg.Logger.With(slog.String("consumer", cfg.Durable), slog.String("stream", cfg.Stream)),
		operatorLog: loglimit.Limiter{Interval: ConfigErrorLogInterval},
		ready:       cfg.Readiness.state(),
	}
}

// errConsumerGone says the durable consumer no longer exists on the server.
var errConsumerGone = errors.New("the durable consumer no longer exists on the server")

// run creates and reads the consumer until ctx ends (then it returns nil) or
// a failure leaves nothing to wait for (then it returns why).
func (r *reader) run(ctx context.Context, lanes *consume.Lanes) error {
	wait := backoff.NewJittered(r.cfg.BackoffBase, r.cfg.BackoffMax)
	failing := false // a failure was logged: say when consuming resumes
	for {
		err := r.consume(ctx, lanes, func() {
			wait.Reset()
			r.readState(func() { r.reading = true }, nil)
			if failing {
				failing = false
				r.operatorLog = loglimit.Limiter{Interval: ConfigErrorLogInterval}
				r.log.Info("outboxnats: consumer is back: consuming again")
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		if err := r.fatal(err); err != nil {
			return err
		}
		r.readState(func() { r.reading = false }, r.notConsuming(err))
		failing = true
		r.logFailure(err, wait.Next())
		if !wait.Sleep(ctx, nil) {
			return nil
		}
	}
}

// fatal returns the error Consume returns for err, or nil if waiting and
// trying again can help.
func (r *reader) fatal(err error) error {
	if nc := r.js.Conn(); errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) || (nc != nil && nc.IsClosed()) {
		why := ""
		if nc != nil && nc.LastError() != nil {
			why = fmt.Sprintf(" (last error: %v)", nc.LastError())
		}
		return fmt.Errorf("outboxnats: consumer %s on stream %s: the NATS connection is closed for good%s, so nothing more can be read on it "+
			"(nats.go closes it after MaxReconnects failed attempts, or the application closed it); connect again and call Consume again, "+
			"or connect with nats.MaxReconnects(-1) to reconnect forever: %w", r.cfg.Durable, r.cfg.Stream, why, nats.ErrConnectionClosed)
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 400 {
		return fmt.Errorf("outboxnats: consumer %s on stream %s: the server refuses the consumer's configuration; "+
			"fix the ConsumerConfig, or delete the durable consumer if it was made with other settings (it is created again): %w", r.cfg.Durable, r.cfg.Stream, err)
	}
	return nil
}

// logFailure logs why consuming stopped: at ERROR level (bounded) what an
// operator must fix, at WARN level what passes by itself.
func (r *reader) logFailure(err error, retryIn time.Duration) {
	retry := slog.Duration("retry_in", retryIn)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if r.operatorLog.Allow("stream") {
			r.log.Error(fmt.Sprintf("outboxnats: consumer cannot read: stream %s not found; create it (the relay publishes to it too), consuming resumes once it exists", r.cfg.Stream),
				retry, slog.Any("error", err))
			return
		}
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		if r.operatorLog.Allow("jetstream") {
			r.log.Error("outboxnats: consumer cannot read: JetStream is not enabled on the server or for this account; enable it, consuming resumes then",
				retry, slog.Any("error", err))
			return
		}
	case errors.Is(err, errConsumerGone), errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
		r.log.Warn(fmt.Sprintf("outboxnats: durable consumer %s was deleted on the server; creating it again (the stream's stored messages come again from the first: the inbox skips those already applied)", r.cfg.Durable),
			retry, slog.Any("error", err))
		return
	default:
		r.log.Warn("outboxnats: consumer read stopped; starting it again", retry, slog.Any("error", err))
		return
	}
	r.log.Debug("outboxnats: consumer still cannot read (logged at ERROR level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", err))
}

// notConsuming is why the consumer is not ready after its read stopped with
// err: what an operator must fix, or what it does meanwhile.
func (r *reader) notConsuming(err error) error {
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("stream %s not found; create it, consuming resumes once it exists: %w", r.cfg.Stream, err)
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Errorf("JetStream is not enabled on the server or for this account; enable it: %w", err)
	case errors.Is(err, errConsumerGone), errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("durable consumer %s was deleted on the server; creating it again: %w", r.cfg.Durable, err)
	}
	return fmt.Errorf("read stopped; starting it again: %w", err)
}

// consume creates the consumer and reads it until the read breaks or ctx
// ends; reading is called once messages can flow.
func (r *reader) consume(ctx context.Context, lanes *consume.Lanes, reading func()) error {
	cons, err := r.js.CreateOrUpdateConsumer(ctx, r.cfg.Stream, r.cfg.serverConfig())
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	iter, err := cons.Messages(jetstream.PullMaxMessages(r.cfg.Concurrency * 16))
	if err != nil {
		return fmt.Errorf("read consumer: %w", err)
	}
	defer iter.Stop()
	stop := context.AfterFunc(ctx, iter.Stop)
	defer stop()
	reading()
	for {
		msg, err := iter.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				return err // the iterator stopped: deleted consumer, closed connection...
			}
			// No heartbeat: the server lost the pull request (it is sent
			// again) or the consumer, deleted while the connection was
			// down or kept in memory by a server that restarted, and then
			// no deletion notice ever comes.
			if _, err := cons.Info(ctx); errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("%w: %w", errConsumerGone, err)
			}
			if nc := r.js.Conn(); nc != nil && nc.IsConnected() {
				// Connected, the consumer there, yet silent: a server
				// problem, or a permission denied on the pull subject
				// (reported to the connection's error handler).
				r.log.Warn("outboxnats: consumer missed the server's heartbeats while connected; pulling again", slog.Any("error", err))
			}
			continue
		}
		m, err := FromMsg(msg)
		if err != nil {
			r.log.Error("outboxnats: message parked: not an outbox message", slog.Any("error", err))
			_ = msg.TermWithReason("not an outbox message")
			continue
		}
		if !lanes.Submit(ctx, &delivery{msg: msg, m: m}) {
			return nil // unacknowledged: the server delivers it again
		}
	}
}

// watchConnection logs, until stop is called, when the connection drops
// (nats.go reconnects by itself, and the read resumes after it) and when it
// is back, so that the consumer's log tells its outages even though the
// connection is the caller's.
func (r *reader) watchConnection() (stop func()) {
	nc := r.js.Conn()
	if nc == nil {
		return func() {}
	}
	changes := nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CONNECTED)
	done := make(chan struct{})
	go func() {
		defer close(done)
		lost := false
		for status := range changes {
			switch {
			case status == nats.CONNECTED && lost:
				lost = false
				r.readState(func() { r.connLost = false }, nil)
				r.log.Info("outboxnats: consumer's connection is back: consuming again", slog.String("server", nc.ConnectedUrlRedacted()))
			case status != nats.CONNECTED && !lost:
				lost = true
				r.readState(func() { r.connLost = true }, fmt.Errorf("lost its connection to the server; nats.go reconnects (last error: %v)", nc.LastError()))
				r.log.Warn("outboxnats: consumer lost its connection; nats.go reconnects (the server delivers again what was not acknowledged)",
					slog.Any("error", nc.LastError()))
			}
		}
	}()
	return func() {
		nc.RemoveStatusListener(changes)
		<-done
	}
}
