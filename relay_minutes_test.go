package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// fakeRollup records the adds it is given; errs are the errors of the
// next calls, in turn (nil once they run out).
type fakeRollup struct {
	adds [][2]int64
	errs []error
}

func (f *fakeRollup) AddMinute(_ context.Context, published, failed int64) error {
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		if err != nil {
			return err
		}
	}
	f.adds = append(f.adds, [2]int64{published, failed})
	return nil
}

func (f *fakeRollup) Minutes(context.Context, time.Duration) ([]outboxdriver.Minute, time.Time, error) {
	return nil, time.Time{}, nil
}

func TestMinuteCountsCountPublishedAndFailedAttemptsButNotPostponementsOrReleases(t *testing.T) {
	t.Parallel()
	var c minuteCounts
	c.settled(outboxdriver.Settlement{
		Published: []uuid.UUID{uuid.New(), uuid.New()},
		Retry:     []outboxdriver.Retry{{ID: uuid.New(), Error: "timeout"}, {ID: uuid.New(), Error: "unreachable", Unsent: true}},
		Dead:      []outboxdriver.Failure{{ID: uuid.New(), Error: "rejected"}},
		Release:   []uuid.UUID{uuid.New()},
	})
	c.settled(outboxdriver.Settlement{Published: []uuid.UUID{uuid.New()}})
	if p, f := c.take(); p != 3 || f != 2 {
		t.Fatalf("took published %d, failed %d; want 3 (2+1) and 2 (a retry that counts, a dead letter; not the postponement nor the release)", p, f)
	}
	if p, f := c.take(); p != 0 || f != 0 {
		t.Fatalf("a second take got published %d, failed %d; want the counts started again from zero", p, f)
	}
}

func TestAddMinuteKeepsTheCountsOfAFailedAddForTheNextBeat(t *testing.T) {
	t.Parallel()
	r := &Relay{log: slog.New(slog.DiscardHandler)}
	rollup := &fakeRollup{errs: []error{errors.New("connection reset")}}
	a := &minuteAdds{rollup: rollup, firstDrawn: true} // the first add at start
	start := time.Now()
	r.lastWork.minutes.published.Add(5)
	r.lastWork.minutes.failed.Add(2)
	r.addMinute(t.Context(), a, start)
	if len(rollup.adds) != 0 {
		t.Fatalf("a failed add wrote %v", rollup.adds)
	}
	r.lastWork.minutes.published.Add(1)
	r.addMinute(t.Context(), a, start.Add(10*time.Second))
	if fmt.Sprint(rollup.adds) != "[[6 2]]" {
		t.Fatalf("the beat after a failed add wrote %v; want [[6 2]]: the failed add's counts and the new ones", rollup.adds)
	}
}

func TestAnIdleRelayAddsAtItsSecondBeatThenAboutOnceAMinute(t *testing.T) {
	t.Parallel()
	r := &Relay{log: slog.New(slog.DiscardHandler)}
	rollup := &fakeRollup{}
	a := minuteAdds{rollup: rollup, firstDrawn: true, firstBeat: 1}
	start := time.Now()
	for beat := range 13 { // two minutes of 10 s heartbeats
		r.addMinute(t.Context(), &a, start.Add(time.Duration(beat)*10*time.Second))
	}
	// At 10 s, 60 s and 110 s: not at the start, when relays starting
	// together would all count the backlog, yet every minute gets a row
	// with a sample.
	if fmt.Sprint(rollup.adds) != "[[0 0] [0 0] [0 0]]" {
		t.Fatalf("an idle relay's adds over two minutes of beats: %v; want three empty adds (at 10, 60 and 110 s)", rollup.adds)
	}
	r.lastWork.minutes.failed.Add(1)
	r.addMinute(t.Context(), &a, start.Add(120*time.Second))
	if len(rollup.adds) != 4 || rollup.adds[3] != [2]int64{0, 1} {
		t.Fatalf("a beat with a failure to count, 10 s after an add, wrote %v; want it added at once", rollup.adds)
	}
}

// A relay's first add comes at a heartbeat drawn between its second and
// its sixth, so that relays started together do not all count their
// backlogs at once.
func TestARelaysFirstAddComesAtABeatDrawnBetweenItsSecondAndItsSixth(t *testing.T) {
	t.Parallel()
	r := &Relay{log: slog.New(slog.DiscardHandler)}
	seen := map[int]bool{}
	for range 200 {
		rollup := &fakeRollup{}
		var a minuteAdds
		a.rollup = rollup
		beat := 0
		for ; len(rollup.adds) == 0 && beat < 10; beat++ {
			r.addMinute(t.Context(), &a, time.Now())
		}
		if first := beat - 1; first < 1 || first > 5 {
			t.Fatalf("a relay's first add came at heartbeat %d (the one at start is 0); want the second to the sixth (1 to 5)", first)
		} else {
			seen[first] = true
		}
	}
	if len(seen) < 2 {
		t.Fatalf("200 relays all added first at the same heartbeat %v; want them spread", seen)
	}
}

func TestARelayStartingKeepsItsFirstCountsForItsSecondBeat(t *testing.T) {
	t.Parallel()
	r := &Relay{log: slog.New(slog.DiscardHandler)}
	rollup := &fakeRollup{}
	a := minuteAdds{rollup: rollup, firstDrawn: true, firstBeat: 1}
	start := time.Now()
	r.lastWork.minutes.published.Add(3)
	r.addMinute(t.Context(), &a, start)
	if len(rollup.adds) != 0 {
		t.Fatalf("the first beat added %v; want nothing before the second beat", rollup.adds)
	}
	r.lastWork.minutes.published.Add(2)
	r.addMinute(t.Context(), &a, start.Add(10*time.Second))
	if fmt.Sprint(rollup.adds) != "[[5 0]]" {
		t.Fatalf("the second beat added %v; want the 5 published since the start", rollup.adds)
	}
}

func TestAMissingRollupTableIsLoggedOnceAndAskedAgainEveryTenBeats(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	r := &Relay{log: slog.New(slog.NewTextHandler(&logs, nil))}
	notMigrated := fmt.Errorf("%w: the per-minute rollup does not exist (migration 10)", outboxdriver.ErrNotMigrated)
	rollup := &fakeRollup{errs: []error{notMigrated, notMigrated}}
	a := &minuteAdds{rollup: rollup, firstDrawn: true} // the first add at start
	start := time.Now()
	r.lastWork.minutes.published.Add(4)
	for beat := range 2*registryRetryBeats + 3 {
		r.lastWork.minutes.published.Add(1)
		r.addMinute(t.Context(), a, start.Add(time.Duration(beat)*time.Second))
	}
	// Beats 0 and 11 meet the missing table, beat 22 finds it migrated.
	if len(rollup.adds) != 1 || rollup.adds[0] != [2]int64{4 + 2*registryRetryBeats + 3, 0} {
		t.Fatalf("adds %v; want one, at the third try, with every count since the start (%d published)", rollup.adds, 4+2*registryRetryBeats+3)
	}
	if n := strings.Count(logs.String(), "not adding to the per-minute rollup"); n != 1 {
		t.Fatalf("the missing table was logged %d times; want once:\n%s", n, logs.String())
	}
}
