package outboxaws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/consume"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// receiver keeps ConsumeSQS's receives going: it looks the queue up,
// receives its messages and hands them to the lanes, extends the
// visibility of those the process holds, and decides, when a receive
// fails, how to say so and when to try again.
type receiver struct {
	cfg     ConsumerSQSConfig
	client  *sqs.Client
	ctx     context.Context // ConsumeSQS's, for the calls made outside an attempt (Working, the heartbeat)
	log     *slog.Logger
	maxHeld int
	ready   *consume.Readiness

	// operatorLog bounds the ERROR lines of a failure only an operator
	// fixes; it is renewed when consuming resumes, so that the next
	// failure is logged at once. The deletions and parkings of the lanes
	// log through it too, hence the pointer swapped whole.
	operatorLog atomic.Pointer[loglimit.Limiter]

	urlMu    sync.Mutex
	queueURL string // resolved URLs; empty until looked up
	parkURL  string

	// held are the messages handed to the lanes and not yet deleted or
	// parked, by SQS message id: a receive asks only for what the lanes
	// have room for, the heartbeat extends their visibility, and a message
	// SQS delivers again while the process holds it (its visibility ran
	// out) only renews its receipt handle instead of being handled twice.
	mu   sync.Mutex
	held map[string]*sqsDelivery
	room chan struct{} // signalled when a message leaves held
}

func newReceiver(ctx context.Context, client *sqs.Client, cfg ConsumerSQSConfig, maxHeld int) *receiver {
	r := &receiver{
		cfg: cfg, client: client, ctx: ctx, maxHeld: maxHeld,
		log:   cfg.Logger.With(slog.String("consumer", cfg.Name), slog.String("queue", cfg.Queue)),
		ready: cfg.Readiness.state(),
		held:  map[string]*sqsDelivery{}, room: make(chan struct{}, 1),
	}
	if strings.Contains(cfg.Queue, "://") {
		r.queueURL = cfg.Queue
	}
	if strings.Contains(cfg.ParkQueue, "://") {
		r.parkURL = cfg.ParkQueue
	}
	r.operatorLog.Store(&loglimit.Limiter{Interval: ConfigErrorLogInterval})
	return r
}

// errParkQueue marks a failure to send to, or look up, ParkQueue, so that
// the fix names ParkQueue.
var errParkQueue = errors.New("park queue")

// run receives until ctx ends.
func (r *receiver) run(ctx context.Context, lanes *consume.Lanes) {
	wait := backoff.NewJittered(r.cfg.BackoffBase, r.cfg.BackoffMax)
	failing := false // a failure was logged: say when consuming resumes
	for {
		err := r.receive(ctx, lanes, func() {
			wait.Reset()
			r.ready.Consuming()
			if failing {
				failing = false
				r.operatorLog.Store(&loglimit.Limiter{Interval: ConfigErrorLogInterval})
				r.log.Info("outboxaws: consumer is back: receiving again")
			}
		})
		if ctx.Err() != nil {
			return
		}
		r.ready.Failed(r.notConsuming(err))
		failing = true
		r.logFailure(err, wait.Next())
		if !wait.Sleep(ctx, nil) {
			return
		}
	}
}

// receive looks the queue up and receives until a request fails or ctx
// ends; reading is called once a receive succeeded.
func (r *receiver) receive(ctx context.Context, lanes *consume.Lanes, reading func()) error {
	queueURL, err := r.resolve(ctx, &r.queueURL, r.cfg.Queue)
	if err != nil {
		return fmt.Errorf("look up queue %s (GetQueueUrl): %w", r.cfg.Queue, err)
	}
	flowing := false
	for ctx.Err() == nil {
		n := r.free()
		if n == 0 {
			select {
			case <-r.room:
			case <-ctx.Done():
			}
			continue
		}
		// The first receive does not wait: its answer tells that the queue
		// can be read, for the readiness check and the log of a recovery.
		var wait int32
		if flowing {
			wait = int32(r.cfg.WaitTime / time.Second)
		}
		sent := time.Now()
		out, err := r.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:              aws.String(queueURL),
			MaxNumberOfMessages:   int32(min(n, BatchMax)),
			WaitTimeSeconds:       wait,
			VisibilityTimeout:     int32(r.cfg.VisibilityTimeout / time.Second),
			MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameMessageGroupId,
			},
		})
		if err != nil {
			return fmt.Errorf("receive (ReceiveMessage): %w", err)
		}
		if !flowing {
			flowing = true
			reading()
		}
		for _, m := range out.Messages {
			if !r.submit(ctx, lanes, m, sent) {
				return nil
			}
		}
	}
	return nil
}

// resolve returns the URL of queue, a URL or a name looked up once and
// kept in *url.
func (r *receiver) resolve(ctx context.Context, url *string, queue string) (string, error) {
	r.urlMu.Lock()
	defer r.urlMu.Unlock()
	if *url != "" {
		return *url, nil
	}
	out, err := r.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		return "", err
	}
	*url = aws.ToString(out.QueueUrl)
	return *url, nil
}

// submit hands m, received at sent, to the lanes, unless the process holds
// it already (SQS delivered it again: its receipt handle is renewed). A
// message that is not an outbox message is parked at once. It reports
// false if ctx ended first.
func (r *receiver) submit(ctx context.Context, lanes *consume.Lanes, m types.Message, sent time.Time) bool {
	id := aws.ToString(m.MessageId)
	until := sent.Add(r.cfg.VisibilityTimeout)
	r.mu.Lock()
	if d := r.held[id]; d != nil {
		r.mu.Unlock()
		d.mu.Lock()
		d.receipt, d.until = aws.ToString(m.ReceiptHandle), until
		d.mu.Unlock()
		r.log.Warn("outboxaws: consumer received a message it still holds (its visibility ran out: extending it failed); it is handled once, deleted with the new receipt",
			slog.String("sqs_message_id", id))
		return true
	}
	r.mu.Unlock()
	om, err := FromSQSMessage(m)
	if err != nil {
		r.parkForeign(ctx, m, err)
		return true
	}
	d := &sqsDelivery{r: r, raw: m, m: om, attempt: receiveCount(m), receipt: aws.ToString(m.ReceiptHandle), until: until}
	r.mu.Lock()
	r.held[id] = d
	r.mu.Unlock()
	if !lanes.Submit(ctx, d) {
		r.done(d)
		return false // not deleted: SQS delivers it again
	}
	return true
}

// parkForeign parks m, which is not an outbox message, on ParkQueue at
// once; without ParkQueue it leaves it in the queue.
func (r *receiver) parkForeign(ctx context.Context, m types.Message, why error) {
	id := aws.ToString(m.MessageId)
	if r.cfg.ParkQueue == "" {
		r.log.Error("outboxaws: consumer received a message that is no outbox message and has no ParkQueue to park it on; it is left in the queue and comes again after VisibilityTimeout (a redrive policy on the queue moves it to a dead-letter queue)",
			slog.String("sqs_message_id", id), slog.Any("error", why))
		return
	}
	r.log.Error("outboxaws: message parked: not an outbox message", slog.String("sqs_message_id", id), slog.String("park_queue", r.cfg.ParkQueue), slog.Any("error", why))
	if err := r.park(ctx, m, aws.ToString(m.ReceiptHandle), "not an outbox message: "+why.Error()); err != nil && ctx.Err() == nil {
		r.log.Error("outboxaws: parking the message failed; it stays in the queue and comes again after VisibilityTimeout", slog.String("sqs_message_id", id), slog.Any("error", err))
	}
}

// free is how many more messages the lanes have room for.
func (r *receiver) free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.maxHeld-len(r.held), 0)
}

// done takes d out of held: it was deleted or parked, or the lanes dropped
// it.
func (r *receiver) done(d *sqsDelivery) {
	id := aws.ToString(d.raw.MessageId)
	r.mu.Lock()
	if r.held[id] == d {
		delete(r.held, id)
	}
	r.mu.Unlock()
	select {
	case r.room <- struct{}{}:
	default:
	}
}

// delete deletes the message received with receipt from the queue.
func (r *receiver) delete(ctx context.Context, receipt string) error {
	r.urlMu.Lock()
	queueURL := r.queueURL
	r.urlMu.Unlock()
	_, err := r.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(receipt)})
	if err != nil {
		if ctx.Err() == nil {
			r.operatorError("delete messages (DeleteMessage)", err)
		}
		return fmt.Errorf("delete from %s (DeleteMessage): %w", r.cfg.Queue, err)
	}
	return nil
}

// park sends m with why to ParkQueue, then, once SQS took it, deletes it
// from the queue. Never the other way round: a deletion first would lose
// the message if the send failed. A crash between the two parks it twice
// at worst.
func (r *receiver) park(ctx context.Context, m types.Message, receipt, why string) error {
	parkURL, err := r.resolve(ctx, &r.parkURL, r.cfg.ParkQueue)
	if err != nil {
		err = fmt.Errorf("%w %s: look it up (GetQueueUrl): %w", errParkQueue, r.cfg.ParkQueue, err)
		r.operatorError("park messages", err)
		return err
	}
	in := &sqs.SendMessageInput{
		QueueUrl: aws.String(parkURL), MessageBody: m.Body,
		MessageAttributes: parkAttributes(len(aws.ToString(m.Body)), m.MessageAttributes, map[string]string{
			AttrParkedReason: why, AttrParkedBy: r.cfg.Name, AttrParkedFrom: r.cfg.Queue + "/" + aws.ToString(m.MessageId),
		}),
	}
	if strings.HasSuffix(r.cfg.ParkQueue, ".fifo") {
		group := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if group == "" {
			key := aws.ToString(m.MessageAttributes[AttrKey].StringValue)
			if om, err := FromSQSMessage(m); key == "" && err == nil {
				key = om.Key // from SNS's envelope
			}
			group = groupID(key, DefaultGroupIDDefault)
		}
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), m.MessageId
	}
	if _, err := r.client.SendMessage(ctx, in); err != nil {
		err = fmt.Errorf("%w %s: send (SendMessage): %w", errParkQueue, r.cfg.ParkQueue, err)
		r.operatorError("park messages", err)
		return err
	}
	if err := r.delete(ctx, receipt); err != nil {
		return fmt.Errorf("sent to park queue %s: %w", r.cfg.ParkQueue, err)
	}
	return nil
}

// parkAttributes returns attrs with the parking attributes added, in the
// order AttrParkedReason, AttrParkedBy, AttrParkedFrom, as far as SQS's
// MaxAttributes and a message size of MaxMessageSizeDefault (a park queue's
// default maximum) leave room, cut short to fit: a message with 10
// attributes of its own, or as large as a queue takes, is parked with fewer
// or none of them (the ERROR log of the parking says why), rather than
// refused by the park queue, and so never parked.
func parkAttributes(bodySize int, attrs map[string]types.MessageAttributeValue, add map[string]string) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, MaxAttributes)
	room := MaxMessageSizeDefault - bodySize
	for k, v := range attrs {
		out[k] = v
		room -= len(k) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
	}
	for _, name := range []string{AttrParkedReason, AttrParkedBy, AttrParkedFrom} {
		if len(out) >= MaxAttributes {
			break
		}
		if _, taken := out[name]; taken {
			continue // parked before: its first reason stays
		}
		limit := min(4096, room-len(name)-len("String"))
		if limit <= 0 {
			break
		}
		value := attrText(add[name], limit)
		out[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(value)}
		room -= len(name) + len("String") + len(value)
	}
	return out
}

// attrText makes s a value SQS takes: the characters it refuses replaced,
// at most limit bytes, never empty.
func attrText(s string, limit int) string {
	var b strings.Builder
	for _, c := range s {
		if !validText(string(c)) {
			c = utf8.RuneError
		}
		if b.Len()+utf8.RuneLen(c) > limit {
			break
		}
		b.WriteRune(c)
	}
	if b.Len() == 0 {
		return "-"
	}
	return b.String()
}

// startHeartbeat extends, until ctx ends, the visibility of every message
// the process holds whose visibility ends within half a VisibilityTimeout:
// a handler that runs long, or a message queued behind a slow one of its
// key, stays hidden from other receives. It returns a function that stops
// it and waits for it.
func (r *receiver) startHeartbeat(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(max(r.cfg.VisibilityTimeout/4, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			soon := time.Now().Add(r.cfg.VisibilityTimeout / 2)
			r.mu.Lock()
			var due []*sqsDelivery
			for _, d := range r.held {
				d.mu.Lock()
				if d.until.Before(soon) {
					due = append(due, d)
				}
				d.mu.Unlock()
			}
			r.mu.Unlock()
			for _, d := range due {
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				r.extend(callCtx, d)
				cancel()
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// extend makes d's message hidden for another VisibilityTimeout.
func (r *receiver) extend(ctx context.Context, d *sqsDelivery) {
	r.urlMu.Lock()
	queueURL := r.queueURL
	r.urlMu.Unlock()
	receipt := d.handle()
	sent := time.Now()
	_, err := r.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(queueURL), ReceiptHandle: aws.String(receipt), VisibilityTimeout: int32(r.cfg.VisibilityTimeout / time.Second),
	})
	if err != nil {
		if ctx.Err() == nil {
			r.operatorError("extend the visibility of the messages it holds (ChangeMessageVisibility); SQS may deliver them again meanwhile", err)
		}
		return
	}
	d.mu.Lock()
	if d.receipt == receipt {
		d.until = sent.Add(r.cfg.VisibilityTimeout)
	}
	d.mu.Unlock()
}

// operatorError logs a failure of op met outside the receive (deleting,
// parking, extending a visibility): at ERROR level (bounded) when an
// operator must fix it, else at WARN level (bounded too: the lanes log
// each failure of their own).
func (r *receiver) operatorError(op string, err error) {
	fix := r.operatorFix(err)
	level, msg := slog.LevelWarn, "outboxaws: consumer failed to "+op
	if fix != "" {
		level, msg = slog.LevelError, "outboxaws: consumer cannot "+op+" until the configuration is fixed"
	}
	if !r.operatorLog.Load().Allow(op + "\x00" + fix) {
		return
	}
	attrs := []any{slog.Any("error", err)}
	if fix != "" {
		attrs = append(attrs, slog.String("fix", fix))
	}
	r.log.Log(context.Background(), level, msg, attrs...)
}

// logFailure logs why receiving stopped: at ERROR level (bounded) what an
// operator must fix, at WARN level what passes by itself.
func (r *receiver) logFailure(err error, retryIn time.Duration) {
	retry := slog.Duration("retry_in", retryIn)
	if fix := r.operatorFix(err); fix != "" {
		if r.operatorLog.Load().Allow(fix) {
			r.log.Error("outboxaws: consumer cannot receive until the configuration is fixed", slog.String("fix", fix), retry, slog.Any("error", err))
			return
		}
		r.log.Debug("outboxaws: consumer still cannot receive (logged at ERROR level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", err))
		return
	}
	if isDialError(err) {
		r.log.Warn("outboxaws: consumer cannot reach SQS; trying again", retry, slog.Any("error", err))
		return
	}
	r.log.Warn("outboxaws: consumer receive failed; trying again", retry, slog.Any("error", err))
}

// notConsuming is why the consumer is not ready after a receive failed
// with err.
func (r *receiver) notConsuming(err error) error {
	if fix := r.operatorFix(err); fix != "" {
		return fmt.Errorf("%s: %w", fix, err)
	}
	if isDialError(err) {
		return fmt.Errorf("SQS unreachable; trying again: %w", err)
	}
	return fmt.Errorf("receive failed; trying again: %w", err)
}

// operatorFix is what an operator must do about err, or "" if it passes by
// itself (SQS unreachable, throttling, a dropped connection).
func (r *receiver) operatorFix(err error) string {
	var api smithy.APIError
	code := ""
	if errors.As(err, &api) {
		code = api.ErrorCode()
	}
	park := errors.Is(err, errParkQueue)
	switch {
	case notFoundCodes[code] && park:
		return fmt.Sprintf("create the park queue %s (aws sqs create-queue --queue-name NAME), or correct ConsumerSQSConfig.ParkQueue, its region or account", r.cfg.ParkQueue)
	case notFoundCodes[code]:
		return fmt.Sprintf("create the queue %s (the relay publishes to it), or correct ConsumerSQSConfig.Queue, its region or account", r.cfg.Queue)
	case deniedCodes[code] && park:
		return fmt.Sprintf("check the credentials (the SDK's chain: AWS_ACCESS_KEY_ID, AWS_PROFILE, the instance's role) and that they allow sqs:GetQueueUrl and sqs:SendMessage on %s", r.cfg.ParkQueue)
	case deniedCodes[code]:
		return fmt.Sprintf("check the credentials (the SDK's chain: AWS_ACCESS_KEY_ID, AWS_PROFILE, the instance's role) and that they allow sqs:GetQueueUrl, sqs:ReceiveMessage, sqs:DeleteMessage and sqs:ChangeMessageVisibility on %s", r.cfg.Queue)
	}
	return ""
}
