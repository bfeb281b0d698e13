package outboxtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxtest"
)

func TestRecorderFailsAsScriptedAndKeepsWhatItConfirmed(t *testing.T) {
	t.Parallel()
	rec := &outboxtest.Recorder{Fail: func(m outbox.Message, attempt int) error {
		switch {
		case m.Topic == "poison":
			return outbox.Permanent(errors.New("rejected"))
		case m.Topic == "flaky" && attempt == 1:
			return errors.New("timeout")
		}
		return nil
	}}
	batch := []outbox.Message{
		{ID: uuid.New(), Topic: "flaky", Key: "k"},
		{ID: uuid.New(), Topic: "fine", Key: "k"}, // behind the failed one of its key
		{ID: uuid.New(), Topic: "poison", Key: "other"},
		{ID: uuid.New(), Topic: "fine"},
	}
	errs := rec.Publish(context.Background(), batch)
	if errs[0] == nil || outbox.IsPermanent(errs[0]) || !outbox.IsHeldBack(errs[1]) || !outbox.IsPermanent(errs[2]) || errs[3] != nil {
		t.Fatalf("outcomes %v, want retryable, held back, permanent, nil", errs)
	}
	if got := rec.Published(); len(got) != 1 || got[0].ID != batch[3].ID {
		t.Fatalf("published %v, want only the last message", got)
	}
	errs = rec.Publish(context.Background(), batch[:2])
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("second attempt outcomes %v, want both confirmed", errs)
	}
	if rec.Attempts(batch[0].ID) != 2 || rec.Attempts(batch[1].ID) != 1 {
		t.Fatalf("attempts %d and %d, want 2 and 1 (a held back message is not tried)", rec.Attempts(batch[0].ID), rec.Attempts(batch[1].ID))
	}
	var _ outbox.KeyOrderKeeper = rec
}

func TestRecorderIsSafeForConcurrentPublishers(t *testing.T) {
	t.Parallel()
	rec := &outboxtest.Recorder{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				rec.Publish(context.Background(), []outbox.Message{{ID: uuid.New(), Topic: "t"}})
				_ = rec.Published()
			}
		})
	}
	wg.Wait()
	if n := len(rec.Published()); n != 400 {
		t.Fatalf("recorded %d messages, want 400", n)
	}
}
