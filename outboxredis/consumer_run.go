package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// readBlock is how long one XREADGROUP waits for new entries: also how long
// Consume may take to return after its context ends, since a blocked read
// does not see the context end.
const readBlock = time.Second

// reader keeps Consume's group read: it creates the group, reads the
// entries the group gives this consumer and those that dead consumers left,
// until a read fails, and decides whether to try again or give up.
type reader struct {
	cfg    ConsumerConfig
	client redis.UniversalClient
	log    *slog.Logger
	read   int // entries one read asks for

	// operatorLog bounds the ERROR lines of a failure only an operator
	// fixes; it is renewed when consuming resumes, so that the next
	// failure is logged at once. The lanes' acknowledgements log through
	// it too, hence the pointer swapped whole.
	operatorLog atomic.Pointer[loglimit.Limiter]
	ready       *consume.Readiness

	// inFlight are the ids of the entries handed to the lanes and not yet
	// acknowledged or parked: a read asks only for what the lanes have
	// room for, keep resets their idle time, and an entry of this
	// consumer that XAUTOCLAIM returns while it waits in the lanes is not
	// handed over twice.
	mu       sync.Mutex
	inFlight map[string]bool
	room     chan struct{} // signalled when an entry leaves inFlight
}

func newReader(client redis.UniversalClient, cfg ConsumerConfig, read int) *reader {
	r := &reader{
		cfg:      cfg,
		client:   client,
		log:      cfg.Logger.With(slog.String("consumer_group", cfg.Group), slog.String("stream", cfg.Stream), slog.String("consumer", cfg.Consumer)),
		read:     read,
		ready:    cfg.Readiness.state(),
		inFlight: map[string]bool{},
		room:     make(chan struct{}, 1),
	}
	r.operatorLog.Store(&loglimit.Limiter{Interval: ConfigErrorLogInterval})
	return r
}

// errParkStreamType marks a WRONGTYPE reply to the XADD to ParkStream, so
// that the fix names ParkStream, not Stream.
var errParkStreamType = errors.New("the park stream's key holds another type")

// errClosed is what Consume returns when the client is closed.
var errClosed = errors.New("outboxredis: consumer: the Redis client is closed, so nothing more can be read with it; make a new client and call Consume again")

// run creates and reads the group until ctx ends (then it returns nil) or
// the client is closed (then it returns why).
func (r *reader) run(ctx context.Context, lanes *consume.Lanes) error {
	wait := backoff.NewJittered(r.cfg.BackoffBase, r.cfg.BackoffMax)
	failing := false // a failure was logged: say when consuming resumes
	for {
		err := r.consume(ctx, lanes, func() {
			wait.Reset()
			r.ready.Consuming()
			if failing {
				failing = false
				r.operatorLog.Store(&loglimit.Limiter{Interval: ConfigErrorLogInterval})
				r.log.Info("outboxredis: consumer is back: consuming again")
			}
		})
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, redis.ErrClosed) {
			return fmt.Errorf("%w: %w", errClosed, err)
		}
		r.ready.Failed(r.notConsuming(err))
		failing = true
		r.logFailure(err, wait.Next())
		if !wait.Sleep(ctx, nil) {
			return nil
		}
	}
}

// consume creates the group and reads it until a read fails or ctx ends;
// reading is called once entries flow, XREADGROUP and XAUTOCLAIM having
// answered. Called at the group's creation, a command refused every time
// (NOPERM on XAUTOCLAIM alone, say) would make the consumer look back at
// each retry, renewing the ERROR log's limit and the backoff.
func (r *reader) consume(ctx context.Context, lanes *consume.Lanes, reading func()) error {
	err := r.client.XGroupCreateMkStream(ctx, r.cfg.Stream, r.cfg.Group, "0").Err()
	if err != nil && !redis.HasErrorPrefix(err, "BUSYGROUP") {
		return fmt.Errorf("create consumer group: %w", err)
	}
	// The entries the group gave this consumer's name before (a process
	// that died under it) come first.
	if err := r.readOwnPending(ctx, lanes); err != nil {
		return err
	}
	claimEvery := max(r.cfg.ClaimAfter/3, 10*time.Millisecond)
	nextClaim := time.Now()
	flowing := false
	for ctx.Err() == nil {
		if !time.Now().Before(nextClaim) {
			r.keep(ctx)
			if err := r.takeOver(ctx, lanes); err != nil {
				return err
			}
			nextClaim = time.Now().Add(claimEvery)
		}
		if !flowing {
			// XREADGROUP answered reading the own pending entries.
			flowing = true
			reading()
		}
		n := r.free()
		if n == 0 {
			select {
			case <-r.room:
			case <-time.After(time.Until(nextClaim)):
			case <-ctx.Done():
			}
			continue
		}
		streams, err := r.client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: r.cfg.Group, Consumer: r.cfg.Consumer, Streams: []string{r.cfg.Stream, ">"},
			Count: int64(n), Block: min(readBlock, max(time.Until(nextClaim), time.Millisecond)),
		}).Result()
		if errors.Is(err, redis.Nil) {
			continue // nothing new within the block
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		for _, s := range streams {
			for _, x := range s.Messages {
				if ok, _ := r.submit(ctx, lanes, x, 1); !ok {
					return nil
				}
			}
		}
	}
	return nil
}

// readOwnPending hands over the entries the group gave this consumer and
// that were not acknowledged, oldest first.
func (r *reader) readOwnPending(ctx context.Context, lanes *consume.Lanes) error {
	after := "0"
	for ctx.Err() == nil {
		streams, err := r.client.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: r.cfg.Group, Consumer: r.cfg.Consumer, Streams: []string{r.cfg.Stream, after}, Count: int64(r.read),
		}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read own pending entries: %w", err)
		}
		var xs []redis.XMessage
		for _, s := range streams {
			xs = append(xs, s.Messages...)
		}
		if len(xs) == 0 {
			return nil
		}
		if _, err := r.submitCounted(ctx, lanes, xs); err != nil {
			return err
		}
		after = xs[len(xs)-1].ID
	}
	return nil
}

// takeOver takes the entries that other consumers of the group (dead ones)
// left unacknowledged for ClaimAfter, and hands them over, as far as the
// lanes have room.
func (r *reader) takeOver(ctx context.Context, lanes *consume.Lanes) error {
	start := "0-0"
	for ctx.Err() == nil {
		n := r.free()
		if n == 0 {
			return nil
		}
		xs, next, err := r.client.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: r.cfg.Stream, Group: r.cfg.Group, Consumer: r.cfg.Consumer,
			MinIdle: r.cfg.ClaimAfter, Start: start, Count: int64(n),
		}).Result()
		if err != nil {
			return fmt.Errorf("take over entries idle for %v: %w", r.cfg.ClaimAfter, err)
		}
		// XAUTOCLAIM also returns this consumer's own entries idle for as
		// long: those the lanes hold behind a slow key are not counted,
		// those whose acknowledgement or parking failed are.
		handed, err := r.submitCounted(ctx, lanes, xs)
		if handed > 0 {
			r.log.Warn("outboxredis: consumer took over entries that a consumer of the group was given and did not acknowledge within ClaimAfter (it died, took longer, or its acknowledgement failed)",
				slog.Int("entries", handed), slog.Duration("claim_after", r.cfg.ClaimAfter))
		}
		if err != nil {
			return err
		}
		if next == "0-0" || next == "" {
			return nil
		}
		start = next
	}
	return nil
}

// submitCounted hands xs over with the number of times the group delivered
// each (XPENDING), so that deliveries to consumers that died count as
// attempts, and returns how many it handed to the lanes. Without the counts
// it hands nothing over: the entries stay this consumer's, read again with
// its own pending entries once the error passes.
func (r *reader) submitCounted(ctx context.Context, lanes *consume.Lanes, xs []redis.XMessage) (handed int, err error) {
	if len(xs) == 0 {
		return 0, nil
	}
	counts := make([]*redis.XPendingExtCmd, len(xs))
	_, err = r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, x := range xs {
			counts[i] = p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: r.cfg.Stream, Group: r.cfg.Group, Start: x.ID, End: x.ID, Count: 1})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read the delivery counts of entries: %w", err)
	}
	for i, x := range xs {
		attempt := 1
		if pending := counts[i].Val(); len(pending) == 1 {
			attempt = max(int(pending[0].RetryCount), 1)
		}
		ok, queued := r.submit(ctx, lanes, x, attempt)
		if !ok {
			return handed, nil
		}
		if queued {
			handed++
		}
	}
	return handed, nil
}

// submit hands x over to the lanes unless they hold it already (queued
// reports whether it did); ok is false if ctx ended first. An entry that is
// not an outbox message is parked on ParkStream at once. An entry trimmed
// from the stream while unacknowledged (the own pending entries come back
// without fields) is acknowledged, with an ERROR log: its message is lost
// to the group.
func (r *reader) submit(ctx context.Context, lanes *consume.Lanes, x redis.XMessage, attempt int) (ok, queued bool) {
	if len(x.Values) == 0 {
		r.log.Error("outboxredis: consumer: an unacknowledged entry was trimmed from the stream (MAXLEN or XTRIM) before the group handled it; its message is lost to this group. Trim less, or keep consumers up",
			slog.String("entry", x.ID))
		if err := r.client.XAck(ctx, r.cfg.Stream, r.cfg.Group, x.ID).Err(); err != nil {
			r.operatorError("acknowledge entries (XACK)", err)
		}
		return true, false
	}
	m, err := FromEntry(r.cfg.Stream, x)
	if err != nil {
		r.log.Error("outboxredis: message parked: not an outbox message", slog.String("entry", x.ID), slog.String("park_stream", r.cfg.ParkStream), slog.Any("error", err))
		if err := r.park(ctx, x.ID, x.Values, "not an outbox message: "+err.Error()); err != nil {
			r.log.Error("outboxredis: parking the entry failed; it stays unacknowledged and comes again after ClaimAfter", slog.String("entry", x.ID), slog.Any("error", err))
		}
		return true, false
	}
	r.mu.Lock()
	if r.inFlight[x.ID] {
		r.mu.Unlock()
		return true, false
	}
	r.inFlight[x.ID] = true
	r.mu.Unlock()
	if !lanes.Submit(ctx, &delivery{r: r, id: x.ID, values: x.Values, m: m, attempt: attempt}) {
		r.done(x.ID)
		return false, false // unacknowledged: the group gives it again
	}
	return true, true
}

// free is how many more entries the lanes have room for.
func (r *reader) free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.read*2-len(r.inFlight), 0)
}

// done takes id out of inFlight: it was acknowledged or parked.
func (r *reader) done(id string) {
	r.mu.Lock()
	delete(r.inFlight, id)
	r.mu.Unlock()
	select {
	case r.room <- struct{}{}:
	default:
	}
}

// park appends the entry's fields with why to ParkStream, then, once Redis
// appended it, acknowledges the entry. Not in one MULTI: a transaction runs
// the XACK even when the XADD fails (ParkStream a key of another type), and
// the message would be gone from both. A crash between the two parks the
// entry twice at worst.
func (r *reader) park(ctx context.Context, id string, values map[string]any, why string) error {
	fields := make(map[string]any, len(values)+3)
	for k, v := range values {
		fields[k] = v
	}
	fields[FieldParkedReason] = why
	fields[FieldParkedFrom] = r.cfg.Stream + "/" + id
	fields[FieldParkedBy] = r.cfg.Group
	if err := r.client.XAdd(ctx, &redis.XAddArgs{Stream: r.cfg.ParkStream, Values: fields}).Err(); err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			err = fmt.Errorf("%w: %w", errParkStreamType, err)
		}
		r.operatorError("park entries (XADD to the park stream)", err)
		return fmt.Errorf("append to park stream %s: %w", r.cfg.ParkStream, err)
	}
	if err := r.client.XAck(ctx, r.cfg.Stream, r.cfg.Group, id).Err(); err != nil {
		r.operatorError("acknowledge entries (XACK)", err)
		return fmt.Errorf("acknowledge entry %s, appended to park stream %s: %w", id, r.cfg.ParkStream, err)
	}
	return nil
}

// operatorError logs at ERROR level (bounded) a failure of op that an
// operator must fix, met outside the read: acknowledging, parking, telling
// Redis an entry is still worked on. The lanes log the failure itself at
// WARN level and go on.
func (r *reader) operatorError(op string, err error) {
	fix := operatorFix(err, r.cfg)
	if fix == "" || !r.operatorLog.Load().Allow(op+": "+fix) {
		return
	}
	r.log.Error("outboxredis: consumer cannot "+op+" until the configuration is fixed", slog.String("fix", fix), slog.Any("error", err))
}

// logFailure logs why consuming stopped: at ERROR level (bounded) what an
// operator must fix, at WARN level what passes by itself.
func (r *reader) logFailure(err error, retryIn time.Duration) {
	retry := slog.Duration("retry_in", retryIn)
	if fix := operatorFix(err, r.cfg); fix != "" {
		if r.operatorLog.Load().Allow(fix) {
			r.log.Error("outboxredis: consumer cannot read until the configuration is fixed", slog.String("fix", fix), retry, slog.Any("error", err))
			return
		}
		r.log.Debug("outboxredis: consumer still cannot read (logged at ERROR level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", err))
		return
	}
	if redis.HasErrorPrefix(err, "NOGROUP") {
		r.log.Warn(fmt.Sprintf("outboxredis: consumer group %s no longer exists (deleted, or its stream was); creating it again at the stream's first entry (the inbox skips the messages already applied)", r.cfg.Group),
			retry, slog.Any("error", err))
		return
	}
	r.log.Warn("outboxredis: consumer read stopped; starting it again", retry, slog.Any("error", err))
}

// notConsuming is why the consumer is not ready after its read stopped with
// err.
func (r *reader) notConsuming(err error) error {
	if fix := operatorFix(err, r.cfg); fix != "" {
		return fmt.Errorf("%s: %w", fix, err)
	}
	if redis.HasErrorPrefix(err, "NOGROUP") {
		return fmt.Errorf("consumer group %s no longer exists; creating it again: %w", r.cfg.Group, err)
	}
	return fmt.Errorf("read stopped; starting it again: %w", err)
}

// operatorFix is what an operator must do about err, or "" if it passes by
// itself (Redis unreachable or loading, a dropped connection).
func operatorFix(err error, cfg ConsumerConfig) string {
	switch { // HasErrorPrefix finds the reply in err's chain
	case errors.Is(err, errParkStreamType):
		return fmt.Sprintf("key %q holds another type than a stream: rename or delete that key, or set another ConsumerConfig.ParkStream", cfg.ParkStream)
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		return fmt.Sprintf("key %q holds another type than a stream: rename or delete that key, or read another stream", cfg.Stream)
	case redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "WRONGPASS"):
		return "check the user and password given for Redis"
	case redis.HasErrorPrefix(err, "NOPERM"):
		return fmt.Sprintf("let the ACL user run XGROUP, XREADGROUP, XAUTOCLAIM, XCLAIM, XPENDING and XACK on %q and XADD on %q", cfg.Stream, cfg.ParkStream)
	}
	return ""
}

// keep resets the idle time of every entry the process holds (XCLAIM to
// itself, JUSTID, which counts no delivery), once per pass, so that no other
// consumer takes over an entry that waits here for a worker or behind a
// failing one of its key, however many there are and however long the
// handler takes. Without it the last entry of a full window waits about
// the window times a handler's time, which can pass ClaimAfter.
// XCLAIM takes an entry even from a consumer that took it over meanwhile
// (this process was paused past ClaimAfter): both then handle it, and the
// inbox applies it once.
func (r *reader) keep(ctx context.Context) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.inFlight))
	for id := range r.inFlight {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	err := r.client.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream: r.cfg.Stream, Group: r.cfg.Group, Consumer: r.cfg.Consumer, Messages: ids,
	}).Err()
	if err != nil && ctx.Err() == nil {
		r.operatorError("keep the entries it holds (XCLAIM)", err)
	}
}
