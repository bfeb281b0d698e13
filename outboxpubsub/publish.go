package outboxpubsub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-outbox/outbox"
)

// Publish hands the batch to the client's batching publishers (one per
// topic) and reports each message's outcome from its own result, within
// Config.Timeout or the end of ctx; see the package documentation for the
// outcomes.
func (p *Publisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	if len(batch) == 0 {
		return errs
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	topics := make([]string, len(batch))
	for i := range batch {
		topics[i] = p.topic(&batch[i])
	}
	if p.closed {
		for i := range batch {
			errs[i] = &PublishError{ID: batch[i].ID, Topic: topics[i], Err: ErrClosed}
		}
		return errs
	}
	ctx, cancel := context.WithTimeoutCause(ctx, p.cfg.Timeout,
		fmt.Errorf("Config.Timeout (%v) expired: %w", p.cfg.Timeout, context.DeadlineExceeded))
	defer cancel()

	results := make([]*sent, len(batch))
	p.sendAll(ctx, batch, topics, results, errs, all(batch), false)
	p.collect(ctx, batch, topics, results, errs, false)

	// Pub/Sub refuses a whole request for one invalid message in it (the
	// checks before sending know Pub/Sub's limits, so this is the rare
	// case they miss): each message of a refused request goes again alone,
	// and only one refused alone fails for good. With ordering keys all of
	// a key's refused messages go again, in order: the client pauses the
	// key at the first refused alone and the rest come back held back.
	// Past the end of ctx nothing is sent: the refusal stays retryable.
	if ctx.Err() != nil {
		return p.finish(batch, topics, errs)
	}
	var refused []int
	for i, err := range errs {
		if results[i] != nil && status.Code(err) == codes.InvalidArgument {
			refused = append(refused, i)
		}
	}
	if len(refused) > 0 {
		again := make([]*sent, len(batch))
		p.sendAll(ctx, batch, topics, again, errs, refused, true)
		p.collect(ctx, batch, topics, again, errs, true)
	}
	return p.finish(batch, topics, errs)
}

// all returns the indexes of batch.
func all(batch []outbox.Message) []int {
	idx := make([]int, len(batch))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func (p *Publisher) finish(batch []outbox.Message, topics []string, errs []error) []error {
	if p.cfg.OrderingKeys {
		holdBehindFailures(batch, topics, errs)
	}
	return errs
}

// sendAll hands the messages of batch at idx, in order, to the client's
// publishers of their topics (alone: the ones sending a message per
// request), setting results, or errs for the messages not sent.
//
// A key the client paused after a failure is resumed once, before the
// key's first message of the call, and only when no message of it waits in
// the client any more: the failure was reported, the relay's retry is this
// very call, and no later message of the key can slip out ahead of it. A
// message the client refuses at once (flow control, size) or one refused
// before sending stops its key for the rest of the call: its later
// messages are held back, unsent.
func (p *Publisher) sendAll(ctx context.Context, batch []outbox.Message, topics []string, results []*sent, errs []error, idx []int, alone bool) {
	stopped := map[string]int{} // ordered key -> the message that failed first
	begun := map[string]bool{}
	for _, i := range idx {
		m := &batch[i]
		ok := p.orderedKey(topics[i], m.Key)
		if first, held := stopped[ok]; held && ok != "" {
			errs[i] = outbox.HeldBack(&PublishError{ID: m.ID, Topic: topics[i],
				Err: fmt.Errorf("not sent: message %s of key %q failed before it", batch[first].ID, m.Key)})
			continue
		}
		msg, err := p.message(m, topics[i])
		switch {
		case ctx.Err() != nil:
			errs[i] = &PublishError{ID: m.ID, Topic: topics[i], Err: fmt.Errorf("not sent: %w", context.Cause(ctx))}
		case err != nil:
			errs[i] = outbox.Permanent(&PublishError{ID: m.ID, Topic: topics[i], Err: err})
		default:
			t, counted := p.publishers(topics[i]).all, ok
			if alone {
				t = p.alonePublisher(topics[i])
				if ok != "" {
					counted = ok + "\x00alone"
				}
			}
			first := !begun[counted]
			begun[counted] = true
			s := p.send(ctx, t, counted, msg, first)
			results[i] = s
			if ok == "" || !s.refusedAtOnce() {
				continue
			}
		}
		if ok != "" {
			stopped[ok] = i
		}
	}
}

// sent is a message handed to the client: its result, and the release of
// its count in Publisher.queued, done once.
type sent struct {
	r       *pubsub.PublishResult
	release func()
}

// refusedAtOnce reports whether the client failed the message without
// waiting for Pub/Sub, never blocking.
func (s *sent) refusedAtOnce() bool {
	select {
	case <-s.r.Ready():
		_, err := s.r.Get(context.Background())
		return err != nil
	default:
		return false
	}
}

// send hands msg to t, counting it under ordered (if not "") until its
// result is in; first says whether it is the key's first message of the
// call, the only one before which the key may be resumed.
func (p *Publisher) send(ctx context.Context, t *pubsub.Publisher, ordered string, msg *pubsub.Message, first bool) *sent {
	s := &sent{release: func() {}}
	if ordered != "" {
		if p.queued.add(ordered) && first {
			t.ResumePublish(msg.OrderingKey)
		}
		s.release = sync.OnceFunc(func() { p.queued.done(ordered) })
	}
	s.r = t.Publish(ctx, msg)
	return s
}

// collect waits for results and sets each message's outcome in errs.
// alone says whether the messages were sent again one per request, where
// Pub/Sub's refusal concerns the message itself. A result in releases its
// count at once, so that the relay's immediate retry finds the key idle
// and resumes it; one still pending when ctx ends keeps the key counted
// until it comes in.
func (p *Publisher) collect(ctx context.Context, batch []outbox.Message, topics []string, results []*sent, errs []error, alone bool) {
	for i, s := range results {
		if s == nil {
			continue
		}
		_, err := s.r.Get(ctx)
		select {
		case <-s.r.Ready():
			s.release()
		default:
			go func() {
				<-s.r.Ready()
				s.release()
			}()
		}
		errs[i] = nil
		if err != nil {
			errs[i] = p.classify(ctx, &PublishError{ID: batch[i].ID, Topic: topics[i], Err: err}, alone)
		}
	}
}

// holdBehindFailures marks HeldBack every failure of a key after its first
// in the batch: the client sends a key's messages in one request or
// paused behind the failed one, and a request fails whole, so none of them
// was stored, and none is to blame.
func holdBehindFailures(batch []outbox.Message, topics []string, errs []error) {
	failed := map[string]bool{}
	for i, err := range errs {
		if err == nil || batch[i].Key == "" {
			continue
		}
		k := topics[i] + "\x00" + batch[i].Key
		if failed[k] && !outbox.IsPermanent(err) {
			errs[i] = outbox.HeldBack(err)
		}
		failed[k] = true
	}
}

// orderedKey returns the name under which the client keeps the order of
// key on topic, or "" when it keeps none (no ordering keys, or no key).
func (p *Publisher) orderedKey(topic, key string) string {
	if !p.cfg.OrderingKeys || key == "" {
		return ""
	}
	return topic + "\x00" + key
}

// classify marks e by what a retry can do: permanent when none can deliver
// its message, unavailable when the message certainly did not leave (no
// connection could be made), delayed when Pub/Sub asked to slow down,
// plainly retryable otherwise. Configuration errors are logged with their
// fix.
func (p *Publisher) classify(ctx context.Context, e *PublishError, alone bool) error {
	err := e.Err
	var paused pubsub.ErrPublishingPaused
	switch {
	case errors.As(err, &paused):
		// An earlier message of the key failed: this one was not sent.
		return outbox.HeldBack(e)
	case errors.Is(err, pubsub.ErrOversizedMessage):
		return outbox.Permanent(e)
	case errors.Is(err, pubsub.ErrFlowControllerMaxOutstandingBytes), errors.Is(err, pubsub.ErrFlowControllerMaxOutstandingMessages):
		return outbox.RetryAfter(e, p.cfg.ThrottleDelay)
	}
	switch status.Code(err) {
	case codes.NotFound:
		fix := fmt.Sprintf("create the topic (gcloud pubsub topics create %s --project %s), or map the messages to another topic (Config.Topic, TopicPrefix or TopicFor)",
			topicID(e.Topic), projectOf(p.fullName(e.Topic)))
		p.logConfigError(e.Topic, err, fix)
		e.Err = fmt.Errorf("%w (%v); fix: %s", ErrTopicNotFound, err, fix)
		// Retryable: creating the topic fixes it, and the same message is
		// then published; dead-lettering it would lose it for a mistake
		// that is not the message's.
		return e
	case codes.PermissionDenied, codes.Unauthenticated:
		fix := "check the credentials (GOOGLE_APPLICATION_CREDENTIALS or the metadata server's service account) and grant roles/pubsub.publisher on the topic"
		p.logConfigError(e.Topic, err, fix)
		e.Err = fmt.Errorf("%w (%v); fix: %s", ErrPermissionDenied, err, fix)
		return e
	case codes.InvalidArgument:
		if alone {
			return outbox.Permanent(e)
		}
		return e
	case codes.ResourceExhausted:
		return outbox.RetryAfter(e, p.cfg.ThrottleDelay)
	case codes.Unavailable:
		// gRPC reports a connection it could not make as UNAVAILABLE with
		// "while dialing" in the message, and sent nothing on it; any other
		// UNAVAILABLE may have reached Pub/Sub.
		if strings.Contains(status.Convert(err).Message(), "while dialing") {
			return outbox.Unavailable(e)
		}
	}
	if status.Code(err) == codes.DeadlineExceeded {
		// A deadline error may come a moment before ctx reports its own
		// end (a test saw it once, under load): near ctx's deadline, wait
		// for it, for the cause (Config.Timeout or the caller's).
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < deadlineSkew {
			<-ctx.Done()
		}
	}
	if ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
		e.Err = fmt.Errorf("%w (%v)", context.Cause(ctx), err)
	}
	return e
}

// deadlineSkew is how far apart gRPC and a context may see one deadline
// pass.
const deadlineSkew = 100 * time.Millisecond

// keyCounts counts messages by ordered key.
type keyCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// add counts one more message of key and reports whether it is the only
// one.
func (c *keyCounts) add(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return c.n[key] == 1
}

// done counts one message of key less.
func (c *keyCounts) done(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key]--; c.n[key] <= 0 {
		delete(c.n, key)
	}
}
