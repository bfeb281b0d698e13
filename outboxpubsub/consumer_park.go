package outboxpubsub

import (
	"context"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/go-outbox/outbox/internal/backoff"
)

// park gives up on msg for why: it publishes a copy to ParkTopic, then,
// once Pub/Sub stored the copy, acknowledges msg; never the other way
// round, so that a crash in between parks the message twice at worst. A
// publish that fails is tried again with the backoff until ctx ends (then
// msg stays unacknowledged and comes again). Without a ParkTopic, see
// ConsumerConfig.ParkTopic: never acknowledged without a copy kept.
func (c *consumer) park(ctx context.Context, msg *pubsub.Message, why string) error {
	log := c.log.With(slog.String("pubsub_message_id", msg.ID))
	if c.parkPub == nil {
		if msg.DeliveryAttempt != nil {
			log.Warn("outboxpubsub: no ParkTopic: the parked message is handed back (nacked), for the subscription's dead-letter policy to move it to its dead-letter topic after its maximum delivery attempts",
				slog.Int("delivery_attempt", *msg.DeliveryAttempt), slog.String("reason", why))
			msg.Nack()
			return nil
		}
		// Nowhere to keep it: never dropped, it comes again (and again,
		// as the subscription's retry policy paces it) until an operator
		// gives it a place.
		log.Error("outboxpubsub: message to park handed back (nacked): it comes again, since there is nowhere to keep it: no ParkTopic and no dead-letter policy on the subscription (and Parked takes only outbox messages); set ConsumerConfig.ParkTopic, or give the subscription a dead-letter policy",
			slog.String("reason", why), slog.Any("attributes", msg.Attributes), slog.Int("data_bytes", len(msg.Data)))
		msg.Nack()
		return nil
	}
	copied := &pubsub.Message{Data: msg.Data, Attributes: parkedAttributes(msg.Attributes, why, c.subscription+"/"+msg.ID, c.cfg.Name)}
	wait := backoff.NewJittered(c.cfg.BackoffBase, c.cfg.BackoffMax)
	for {
		_, err := c.parkPub.Publish(ctx, copied).Get(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return err
		}
		c.parkFailed(log, err, wait.Next())
		if !wait.Sleep(ctx, nil) {
			return ctx.Err()
		}
	}
	_, err := msg.AckWithResult().Get(ctx)
	return err
}

// parkedAttributes are attrs, but those the client library adds, with the
// AttrParked* attributes, as many as Pub/Sub's limit on attributes leaves
// room for, the reason first.
func parkedAttributes(attrs map[string]string, why, from, by string) map[string]string {
	out := make(map[string]string, len(attrs)+3)
	for k, v := range attrs {
		if !strings.HasPrefix(k, "googclient_") {
			out[k] = v
		}
	}
	if len(why) > MaxAttributeValueBytes {
		why = why[:MaxAttributeValueBytes-3] + "..."
		for !utf8.ValidString(why) {
			why = why[:len(why)-4] + "..."
		}
	}
	for _, a := range [][2]string{{AttrParkedReason, why}, {AttrParkedFrom, from}, {AttrParkedBy, by}} {
		if len(out) < MaxAttributes {
			out[a[0]] = a[1]
		}
	}
	return out
}

// parkFailed logs a failed publish to ParkTopic: at ERROR level (bounded)
// what an operator must fix, at WARN level what passes by itself.
func (c *consumer) parkFailed(log *slog.Logger, err error, retryIn time.Duration) {
	var fix string
	switch status.Code(err) {
	case codes.NotFound:
		fix = "create the park topic (gcloud pubsub topics create " + topicID(c.cfg.ParkTopic) + "), and a subscription on it to keep what is parked"
	case codes.PermissionDenied, codes.Unauthenticated:
		fix = "grant the consumer's credentials roles/pubsub.publisher on the park topic " + c.cfg.ParkTopic
	}
	retry := slog.Duration("retry_in", retryIn)
	if fix == "" {
		log.Warn("outboxpubsub: publishing a parked message to the park topic failed; trying again (it stays unacknowledged meanwhile)", retry, slog.Any("error", err))
		return
	}
	if c.operatorLog.Load().Allow("park: " + fix) {
		log.Error("outboxpubsub: consumer cannot park messages until the configuration is fixed; the message stays unacknowledged and its key waits",
			slog.String("park_topic", c.cfg.ParkTopic), slog.String("fix", fix), retry, slog.Any("error", err))
		return
	}
	log.Debug("outboxpubsub: consumer still cannot park (logged at ERROR level at most once per ConfigErrorLogInterval)", retry, slog.Any("error", err))
}
