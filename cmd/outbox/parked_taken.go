package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// takenOlderDefault is the age past which `inbox status` flags a taken
// message as likely left by a killed process. A retry takes at most
// MaxDeliver attempts with the backoff between them plus the handler's
// time: with the adapters' defaults that is well under it, but a consumer
// configured for long retries needs a longer --taken-older-than.
const takenOlderDefault = 15 * time.Minute

// notTaken refuses to verb p (retry, discard) if a consumer process took
// it: it is in a handler. The refusal names the command that takes it
// back, which the console passes on as it is.
func notTaken(p outbox.ParkedMessage, verb string) error {
	if p.TakenAt.IsZero() {
		return nil
	}
	return fmt.Errorf("message %s was taken by a consumer process of %s at %s and is in its handler: it is unparked, or parked again, when that ends; "+
		"if that process was killed before it ended, take it back: `outbox inbox parked %s --consumer %s --taken %s` (if it still runs, the message is handled twice)",
		p.ID, p.Consumer, p.TakenAt.UTC().Format("2006-01-02T15:04:05Z"), verb, p.Consumer, p.ID)
}

// forgetTaken, with taken, clears the taken mark of consumer's parked
// messages ids, so that a retry or discard works on them: the operator
// says the process that took them was killed. Without ids it does nothing:
// a retry of all never takes back what a process has in a handler.
func forgetTaken(ctx context.Context, t inboxTable, consumer string, ids []uuid.UUID, taken bool) error {
	if !taken || len(ids) == 0 {
		return nil
	}
	_, err := t.ForgetTaken(ctx, consumer, ids...)
	return err
}

// takenBefore returns consumer's parked messages (all consumers' when
// consumer is empty) taken by a process before the time before.
func takenBefore(ctx context.Context, t inboxTable, consumer string, before time.Time) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := eachTakenBefore(ctx, t, consumer, before, func(p outbox.ParkedMessage) { ids = append(ids, p.ID) })
	return ids, err
}

// takenBeforeCounts counts, for each consumer, its parked messages taken
// before the time before (consumers with none are left out).
func takenBeforeCounts(ctx context.Context, t inboxTable, before time.Time) (map[string]int64, error) {
	counts := map[string]int64{}
	err := eachTakenBefore(ctx, t, "", before, func(p outbox.ParkedMessage) { counts[p.Consumer]++ })
	return counts, err
}

func eachTakenBefore(ctx context.Context, t inboxTable, consumer string, before time.Time, fn func(outbox.ParkedMessage)) error {
	return eachParked(ctx, t, consumer, func(p outbox.ParkedMessage) {
		if !p.TakenAt.IsZero() && p.TakenAt.Before(before) {
			fn(p)
		}
	})
}

// eachParked hands fn every parked message of consumer, in id order.
func eachParked(ctx context.Context, t inboxTable, consumer string, fn func(outbox.ParkedMessage)) error {
	return eachListed(func(after uuid.UUID, limit int) ([]outbox.ParkedMessage, error) {
		return t.ListParked(ctx, consumer, after, limit)
	},
		func(p outbox.ParkedMessage) uuid.UUID { return p.ID }, fn)
}
