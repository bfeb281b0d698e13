// Package relaytest is the relay-level conformance suite: it runs real relays
// against a store and checks the guarantees of the design end to end (rolled-back
// messages never published, every committed message published exactly once
// without crashes, retries and dead letters, wake-up latency, idle cost,
// shutdown). Every store runs it with a Harness of its own.
package relaytest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Harness gives the suite one fresh, migrated, isolated outbox table.
type Harness struct {
	// Store is the table's store; it must implement outboxdriver.Admin too.
	Store outboxdriver.Store
	// KeyOrdered is the same table through a store that claims in key
	// order (outboxpg.Options.OrderByKey, say). Nil skips the key-order
	// test.
	KeyOrdered outboxdriver.Store
	// Write inserts msgs in one new transaction and commits it when commit
	// is true (rolls back otherwise). It must not wake relays by itself.
	Write func(ctx context.Context, commit bool, msgs ...*outbox.Message) error
	// Notify wakes the relays of this process serving the table, as
	// Writer.Notify does after a commit.
	Notify func()
	// Statements returns the SQL of every statement the store has sent to
	// the database so far (nil if the store cannot trace them).
	Statements func() []string
	// Scale shrinks the large tests for slow stores: 1 is full size.
	Scale float64
	// OwnWritesWake is set for a store whose wake-up fires on any write
	// to the database, the relay's own registry beats included (SQLite's
	// change watcher): each beat may then wake the relay's idle workers.
	OwnWritesWake bool
}

// Run runs the suite; newHarness is called once per test.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("RolledBackMessageIsNeverPublishedCommittedOneIs", func(t *testing.T) {
		t.Parallel()
		testRollback(t, newHarness(t))
	})
	t.Run("TablesRelayServesTheTablesItsSourceListsAndStopsTheOthers", func(t *testing.T) {
		t.Parallel()
		testTablesRelay(t, newHarness)
	})
	t.Run("ConcurrentWritersAndRelaysPublishEveryMessageExactlyOnce", func(t *testing.T) {
		t.Parallel()
		testConcurrent(t, newHarness(t))
	})
	t.Run("FailuresAreRetriedWithBackoffThenDeadLetteredAndRetryable", func(t *testing.T) {
		t.Parallel()
		testFailures(t, newHarness(t))
	})
	t.Run("UnavailableDestinationCountsNoAttemptAndPausesTheWorker", func(t *testing.T) {
		t.Parallel()
		testUnavailable(t, newHarness(t))
	})
	t.Run("KeyOrderedRelaysKeepEachKeysOrderAndAFailingKeyHoldsBackOnlyItself", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.KeyOrdered == nil {
			t.Skip("the harness sets no KeyOrdered store")
		}
		testKeyOrder(t, h)
	})
	t.Run("KeyOrderedRunsKeepTheOrderAcrossAFailureMidRunAndTheRestCountsNoAttempt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.KeyOrdered == nil {
			t.Skip("the harness sets no KeyOrdered store")
		}
		testKeyOrderRuns(t, h)
	})
	t.Run("KeyOrderedRunsKeepTheOrderThroughAPublisherThatSendsABatchAtOnce", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.KeyOrdered == nil {
			t.Skip("the harness sets no KeyOrdered store")
		}
		testKeyOrderRunsBrokerLike(t, h)
	})
	for name, publisher := range map[string]func(*Recorder) outbox.Publisher{
		"KeyOrderKeeper":                 func(rec *Recorder) outbox.Publisher { return rec },
		"PublisherThatSendsABatchAtOnce": func(rec *Recorder) outbox.Publisher { return BrokerLike{rec} },
	} {
		t.Run("KeyOrderedRunWhoseFirstMessageFailsForGoodHoldsTheRestOfItsKeyThrough"+name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			if h.KeyOrdered == nil {
				t.Skip("the harness sets no KeyOrdered store")
			}
			testKeyOrderPermanentFailureHoldsItsKey(t, h, publisher)
		})
	}
	t.Run("UnorderedStoreHandsABatchOfOneKeyToThePublisherWhole", func(t *testing.T) {
		t.Parallel()
		testUnorderedBatchGoesWhole(t, newHarness(t))
	})
	t.Run("UnavailableDestinationLeavesOtherDestinationsATurn", func(t *testing.T) {
		t.Parallel()
		testUnavailableLeavesOthersATurn(t, newHarness(t))
	})
	t.Run("UnavailableBatchRecordsItsOutcomesBeforeThePause", func(t *testing.T) {
		t.Parallel()
		testUnavailableRecordsBeforePause(t, newHarness(t))
	})
	t.Run("InProcessSignalWakesRelayLongBeforeThePollInterval", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		testWakeLatency(t, h, outbox.Config{DisableListen: true}, nil, func(ctx context.Context, m *outbox.Message) error {
			if err := h.Write(ctx, true, m); err != nil {
				return err
			}
			h.Notify()
			return nil
		})
	})
	t.Run("PollOnlyRelayStillDelivers", func(t *testing.T) {
		t.Parallel()
		testPollOnly(t, newHarness(t))
	})
	t.Run("ExpiredMessagesAreDeadLetteredUnsentAndTheRestOfTheirKeyIsPublished", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		testExpiredMessagesAreNotPublished(t, h, h.Store, false)
	})
	t.Run("InKeyOrderAnExpiredMessageHoldsTheRestOfItsKey", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.KeyOrdered == nil {
			t.Skip("the harness sets no KeyOrdered store")
		}
		testExpiredMessagesAreNotPublished(t, h, h.KeyOrdered, true)
	})
	t.Run("APausedTopicIsNotPublishedWhileTheOthersFlowAndAResumePublishesIt", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		testPausedTopic(t, h, h.Store, false)
	})
	t.Run("InKeyOrderAPausedTopicsMessageHoldsTheRestOfItsKeyUntilTheResume", func(t *testing.T) {
		t.Parallel()
		h := newHarness(t)
		if h.KeyOrdered == nil {
			t.Skip("the harness sets no KeyOrdered store")
		}
		testPausedTopic(t, h, h.KeyOrdered, true)
	})
	t.Run("AMessagePostponedForAPauseThatHadEndedIsMovedBackAndPublished", func(t *testing.T) {
		t.Parallel()
		testLateSeenResume(t, newHarness(t))
	})
	t.Run("ATopicsRateLimitIsNeverExceededAndHoldsUpNoOtherTopic", func(t *testing.T) {
		t.Parallel()
		testTopicRateLimit(t, newHarness(t))
	})
	t.Run("FailedAttemptsAreKeptWithTheirErrorClassAndOutcomeUntilTheMessageIsPublished", func(t *testing.T) {
		t.Parallel()
		testFailedAttemptsAreKept(t, newHarness(t))
	})
	t.Run("ARelayRegistersItselfRefreshesItsRowAndRemovesItWhenItStops", func(t *testing.T) {
		t.Parallel()
		testRelayRegistersItself(t, newHarness(t))
	})
	t.Run("IdleRelaySendsAtMostOneQueryPerPollInterval", func(t *testing.T) {
		t.Parallel()
		testIdle(t, newHarness(t))
	})
	t.Run("ShutdownFinishesInFlightBatches", func(t *testing.T) {
		t.Parallel()
		testShutdownFinishes(t, newHarness(t))
	})
	t.Run("ShutdownDeadlineReleasesLeasesAtOnce", func(t *testing.T) {
		t.Parallel()
		testShutdownReleases(t, newHarness(t))
	})
	t.Run("RetentionKeepsPublishedMessagesThenCleansThemUp", func(t *testing.T) {
		t.Parallel()
		testRetention(t, newHarness(t))
	})
	t.Run("PublishDeadlineCountsFromTheClaimNotItsAnswer", func(t *testing.T) {
		t.Parallel()
		testPublishDeadlineFromLease(t, newHarness(t), 0.6)
	})
	t.Run("ClaimAnsweredAfterNineTenthsOfItsLeaseIsNotPublished", func(t *testing.T) {
		t.Parallel()
		testPublishDeadlineFromLease(t, newHarness(t), 0.95)
	})
	t.Run("IdleWorkersPollWhileOneIsBusy", func(t *testing.T) {
		t.Parallel()
		testIdleWorkersPollWhileOneIsBusy(t, newHarness(t))
	})
	t.Run("RunWaitsForItsGoroutines", func(t *testing.T) {
		t.Parallel()
		testRunWaitsForItsGoroutines(t, newHarness(t))
	})
	t.Run("ShutdownReturnsAtItsDeadlineWhileTheStoreHangs", func(t *testing.T) {
		t.Parallel()
		testShutdownReturnsAtItsDeadlineWhileTheStoreHangs(t, newHarness(t))
	})
	t.Run("OutcomesAreRecordedAfterCancelDespiteAFailedTry", func(t *testing.T) {
		t.Parallel()
		testOutcomesRecordedAfterCancelDespiteAFailedTry(t, newHarness(t))
	})
	t.Run("ObserverHearsEveryExchangeBatchAndOutcome", func(t *testing.T) {
		t.Parallel()
		testObserver(t, newHarness(t))
	})
	t.Run("ReadyWhileTheStoreAnswers", func(t *testing.T) {
		t.Parallel()
		testReady(t, newHarness(t))
	})
	t.Run("FailedRecordingIsLogged", func(t *testing.T) {
		t.Parallel()
		testFailedRecordingIsLogged(t, newHarness(t))
	})
}

// Recorder is a publisher that counts how often each message was published
// and can be told to fail.
type Recorder struct {
	mu     sync.Mutex
	counts map[uuid.UUID]int
	last   map[uuid.UUID]outbox.Message
	order  []uuid.UUID
	// Fail, if set, decides each message's result; nil means success.
	Fail func(m outbox.Message) error
	// changed is signalled after each publish, for waiting without sleeps.
	changed chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{counts: map[uuid.UUID]int{}, last: map[uuid.UUID]outbox.Message{}, changed: make(chan struct{}, 1)}
}

// Close does nothing: a Recorder holds no connection.
func (r *Recorder) Close() error { return nil }

// KeepsKeyOrder marks the Recorder as an outbox.KeyOrderKeeper: it holds
// back a key's later messages after a failure. Wrap it in BrokerLike to test
// a publisher that does not.
func (r *Recorder) KeepsKeyOrder() {}

// BrokerLike is a publisher that sends a batch at once, as the brokers'
// publishers do, and does not hold back a key's later messages after a
// failure (it is not an outbox.KeyOrderKeeper): the relay must give it a
// batch in key order in waves.
type BrokerLike struct{ Recorder *Recorder }

// Publish records the batch, each message on its own result.
func (b BrokerLike) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	for i := range batch {
		errs[i] = b.Recorder.Publish(ctx, batch[i:i+1])[0]
	}
	return errs
}

// Close does nothing.
func (b BrokerLike) Close() error { return nil }

// Publish records the batch.
func (r *Recorder) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := make([]error, len(batch))
	r.mu.Lock()
	failed := map[string]bool{} // keys with a retryable failure in this batch
	for i, m := range batch {
		if m.Key != "" && failed[m.Key] {
			// As a KeyOrderKeeper does: a key's later messages wait for
			// the one that failed.
			errs[i] = outbox.HeldBack(fmt.Errorf("held back behind a failed message of key %q", m.Key))
			continue
		}
		if r.Fail != nil {
			errs[i] = r.Fail(m)
		}
		if errs[i] != nil {
			failed[m.Key] = true
		}
		if errs[i] == nil {
			r.counts[m.ID]++
			r.last[m.ID] = m
			r.order = append(r.order, m.ID)
		}
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return errs
}

// Order returns the ids published so far, in the order they were
// published, duplicates included.
func (r *Recorder) Order() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

// Count returns how often id was published.
func (r *Recorder) Count(id uuid.UUID) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[id]
}

// Distinct returns how many different messages were published.
func (r *Recorder) Distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.counts)
}

// Published returns the last published copy of id.
func (r *Recorder) Published(id uuid.UUID) (outbox.Message, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.last[id]
	return m, ok
}

// WaitFor waits until cond holds, checking after each publish and every 20 ms,
// and fails the test with what after timeout.
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		select {
		case <-r.changed:
		case <-tick.C:
		}
	}
}

// StartRelay runs a relay until the test ends (logging through t) and
// returns it. The test fails if Run does not return nil soon after.
func StartRelay(t *testing.T, store outboxdriver.Store, pub outbox.Publisher, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = TestLogger(t)
	}
	relay, err := outbox.NewRelay(store, pub, cfg)
	if err != nil {
		t.Fatalf("NewRelay: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Relay.Run returned %v after cancel, want nil", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Relay.Run did not return within 30s of cancel")
		}
	})
	return relay
}

func admin(t *testing.T, h Harness) outboxdriver.Admin {
	t.Helper()
	a, ok := h.Store.(outboxdriver.Admin)
	if !ok {
		t.Fatalf("store %T does not implement outboxdriver.Admin", h.Store)
	}
	return a
}

func newMessage(topic string, i int) *outbox.Message {
	return &outbox.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%16), Payload: fmt.Appendf(nil, `{"n":%d}`, i), Headers: map[string]string{"n": fmt.Sprint(i)}}
}

func scaled(h Harness, n int) int {
	if h.Scale <= 0 || h.Scale >= 1 {
		return n
	}
	return max(int(float64(n)*h.Scale), 1)
}

// waitEmpty waits until the table has nothing pending.
func waitEmpty(t *testing.T, h Harness, timeout time.Duration) {
	t.Helper()
	a := admin(t, h)
	deadline := time.Now().Add(timeout)
	for {
		st, err := a.Stats(context.Background())
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.Pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, %d messages are still pending (%d in flight, %d dead)", timeout, st.Pending, st.InFlight, st.Dead)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLogger returns a logger that writes through t.Log, so relay logs show
// only for failed tests (or with -v).
func TestLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
