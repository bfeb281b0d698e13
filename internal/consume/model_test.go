package consume_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/consume"
)

// The model test drives the lanes with a seeded random stream of deliveries
// and checks them against what a broker and an inbox promise. Run it long
// with -consume.long; replay one seed with CONSUME_MODEL_SEED=n (the failure
// prints it).
var long = flag.Bool("consume.long", false, "run the lanes' model test over many seeds")

// modelSeedEnv names the environment variable that replays one seed.
const modelSeedEnv = "CONSUME_MODEL_SEED"

// modelMsg is a message of the model and what its handler does with it.
type modelMsg struct {
	fails  int  // retryable failures before it applies
	gate   bool // fails (retryably) until every message of the other keys settled
	gated  bool // its key has a gate
	key    string
	m      outbox.Message
	poison bool // fails with outbox.Permanent: parked
}

// modelRun is one seed's deliveries and lanes' configuration.
type modelRun struct {
	concurrency, maxHeld int
	deliveries           []*modelMsg // in stream order; a message more than once is a redelivery
	msgs                 []*modelMsg // each message once, in order of its first delivery
	seed                 uint64
}

// generate draws a run from seed. Keys with a gate receive fewer
// deliveries than the lanes hold (MaxHeld): more would fill them and, by
// design, stop the stream (see Lanes).
func generate(seed uint64) *modelRun {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	run := &modelRun{seed: seed, concurrency: 1 + r.IntN(4)}
	keys := make([]string, 2+r.IntN(7))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	gated := map[string]bool{}
	for i := range min(r.IntN(3), len(keys)-1) { // one key at least has no gate
		gated[keys[i]] = true
	}
	gatedBudget := 1 + r.IntN(12)
	run.maxHeld = gatedBudget + 1 + r.IntN(40)
	gatedSent, hasGate := 0, map[string]bool{}
	n := 20 + r.IntN(280)
	for len(run.msgs) < n {
		if len(run.msgs) > 0 && r.IntN(100) < 15 {
			again := run.msgs[r.IntN(len(run.msgs))]
			if !again.gated || gatedSent < gatedBudget {
				gatedSent += b2i(again.gated)
				run.deliveries = append(run.deliveries, again)
			}
			continue
		}
		mm := &modelMsg{}
		switch k := keys[r.IntN(len(keys))]; {
		case r.IntN(100) < 10:
			mm.key = "" // unordered: a queue of its own
		case gated[k] && gatedSent >= gatedBudget:
			mm.key = keys[len(keys)-1] // never gated: at most 2 of at least 2 keys are, from the first
			if gated[mm.key] {
				continue
			}
		default:
			mm.key = k
		}
		mm.gated = gated[mm.key]
		if mm.gated {
			gatedSent++
			mm.gate = !hasGate[mm.key]
			hasGate[mm.key] = true
		}
		if !mm.gate {
			mm.poison = r.IntN(100) < 5
			if r.IntN(100) < 30 {
				mm.fails = 1 + r.IntN(3)
			}
		}
		mm.m = outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders", Key: mm.key}
		run.msgs = append(run.msgs, mm)
		run.deliveries = append(run.deliveries, mm)
	}
	return run
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// world is the state a run's handler and deliveries share: an in-memory
// inbox and the checks of the invariants.
type world struct {
	byID map[uuid.UUID]*modelMsg

	mu         sync.Mutex
	applied    map[string][]uuid.UUID // per key, in order of application
	calls      map[uuid.UUID]int
	inbox      map[uuid.UUID]bool
	order      map[string][]uuid.UUID // per key, in order of first delivery
	othersLeft int                    // messages of keys without a gate not yet applied or parked
	parked     map[uuid.UUID]bool
	running    map[string]bool
	settled    int // deliveries acknowledged or parked
	violations []string
}

func (w *world) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// handle is the consumer's handler: inbox.Apply around an apply that fails
// as the message's plan says. It checks, as it goes, that a key's messages
// are never handled at once, that a message applies once and only after
// every earlier message of its key applied or was parked.
func (w *world) handle(_ context.Context, m outbox.Message) error {
	mm := w.byID[m.ID]
	w.mu.Lock()
	if mm.key != "" && w.running[mm.key] {
		w.violate("key %s: message %s handled while another message of the key was being handled", mm.key, m.ID)
	}
	w.running[mm.key] = true
	w.calls[m.ID]++
	calls := w.calls[m.ID]
	seen := w.inbox[m.ID]
	w.mu.Unlock()
	// The inbox's check and its record are apart, as in a transaction:
	// two copies handled at once would both pass the check.
	runtime.Gosched()
	w.mu.Lock()
	defer w.mu.Unlock()
	defer func() { w.running[mm.key] = false }()
	switch {
	case seen:
		return nil // a duplicate: the inbox skips it
	case mm.gate && w.othersLeft > 0:
		return errors.New("gate closed: the other keys are not all settled")
	case mm.poison:
		return outbox.Permanent(errors.New("poison"))
	case calls <= mm.fails:
		return errors.New("transient failure")
	}
	if w.inbox[m.ID] {
		w.violate("message %s (key %q) applied twice", m.ID, mm.key)
		return nil
	}
	if mm.key != "" {
		for _, earlier := range w.order[mm.key] {
			if earlier == m.ID {
				break
			}
			if !w.inbox[earlier] && !w.parked[earlier] {
				w.violate("key %s: message %s applied before %s, delivered earlier, was applied or parked", mm.key, m.ID, earlier)
			}
		}
	}
	w.inbox[m.ID] = true
	w.applied[mm.key] = append(w.applied[mm.key], m.ID)
	if !mm.gated {
		w.othersLeft--
	}
	return nil
}

// settle counts a delivery acknowledged or parked.
func (w *world) settle(d *fakeDelivery) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settled++
	if d.parked && !w.parked[d.m.ID] {
		w.parked[d.m.ID] = true
		if !w.byID[d.m.ID].gated {
			w.othersLeft--
		}
	}
}

func TestLanesModel(t *testing.T) {
	t.Parallel()
	var seeds []uint64
	switch env := os.Getenv(modelSeedEnv); {
	case env != "":
		seed, err := strconv.ParseUint(env, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", modelSeedEnv, env, err)
		}
		seeds = []uint64{seed}
	default:
		count := 20
		if *long {
			count = 2000
		}
		base := rand.Uint64() >> 1
		for i := range count {
			seeds = append(seeds, base+uint64(i))
		}
	}
	for _, seed := range seeds {
		if !checkModel(t, generate(seed)) {
			return
		}
	}
}

// checkModel runs one seed and reports whether its invariants held.
func checkModel(t *testing.T, run *modelRun) bool {
	t.Helper()
	w := &world{byID: map[uuid.UUID]*modelMsg{}, applied: map[string][]uuid.UUID{}, calls: map[uuid.UUID]int{}, inbox: map[uuid.UUID]bool{},
		order: map[string][]uuid.UUID{}, parked: map[uuid.UUID]bool{}, running: map[string]bool{}}
	for _, mm := range run.msgs {
		w.byID[mm.m.ID] = mm
		w.othersLeft += b2i(!mm.gated)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := consume.Config{Consumer: "model", Concurrency: run.concurrency, MaxHeld: run.maxHeld, MaxDeliver: 1 << 30,
		BackoffBase: 100 * time.Microsecond, BackoffMax: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	lanes := consume.Start(ctx, cfg, w.handle)
	deadline := time.Now().Add(20 * time.Second)
	submitCtx, stopSubmit := context.WithDeadline(ctx, deadline)
	defer stopSubmit()
	var deliveries []*fakeDelivery
	seen := map[uuid.UUID]int{}
	for _, mm := range run.deliveries {
		seen[mm.m.ID]++
		d := &fakeDelivery{attempt: seen[mm.m.ID], m: mm.m, onSettle: w.settle}
		deliveries = append(deliveries, d)
		w.mu.Lock()
		if seen[mm.m.ID] == 1 {
			w.order[mm.key] = append(w.order[mm.key], mm.m.ID)
		}
		w.mu.Unlock()
		if !lanes.Submit(submitCtx, d) {
			w.mu.Lock()
			othersLeft := w.othersLeft
			w.mu.Unlock()
			cancel()
			lanes.Close()
			t.Errorf("seed %d: Submit of delivery %d of %d waited 20 s, %d message(s) of keys without a gate left: a failing key held back the stream (replay with %s=%d)",
				run.seed, len(deliveries), len(run.deliveries), othersLeft, modelSeedEnv, run.seed)
			return false
		}
	}
	for {
		w.mu.Lock()
		settled, othersLeft := w.settled, w.othersLeft
		w.mu.Unlock()
		if settled == len(deliveries) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			lanes.Close()
			t.Errorf("seed %d: %d of %d deliveries settled after 20 s, %d message(s) of keys without a gate left: a failing key held back others, or a message was lost (replay with %s=%d)",
				run.seed, settled, len(deliveries), othersLeft, modelSeedEnv, run.seed)
			return false
		}
		time.Sleep(time.Millisecond)
	}
	lanes.Close()

	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range deliveries {
		if acked, parked := d.state(); acked == parked {
			w.violate("delivery of %s: acked %v, parked %v; want exactly one", d.m.ID, acked, parked)
		}
	}
	for _, mm := range run.msgs {
		switch {
		case mm.poison && (w.inbox[mm.m.ID] || !w.parked[mm.m.ID]):
			w.violate("poison message %s (key %q): applied %v, parked %v; want parked, not applied", mm.m.ID, mm.key, w.inbox[mm.m.ID], w.parked[mm.m.ID])
		case !mm.poison && (!w.inbox[mm.m.ID] || w.parked[mm.m.ID]):
			w.violate("message %s (key %q): applied %v, parked %v; want applied", mm.m.ID, mm.key, w.inbox[mm.m.ID], w.parked[mm.m.ID])
		}
	}
	for key, order := range w.order {
		if key == "" {
			continue
		}
		var want []uuid.UUID
		for _, id := range order {
			if !w.byID[id].poison {
				want = append(want, id)
			}
		}
		if fmt.Sprint(want) != fmt.Sprint(w.applied[key]) {
			w.violate("key %s: applied %v, want the order of first delivery %v", key, w.applied[key], want)
		}
	}
	if len(w.violations) > 0 {
		t.Errorf("seed %d (concurrency %d, max held %d, %d messages, %d deliveries): %d violation(s), replay with %s=%d:\n%s",
			run.seed, run.concurrency, run.maxHeld, len(run.msgs), len(run.deliveries), len(w.violations), modelSeedEnv, run.seed,
			strings.Join(w.violations[:min(len(w.violations), 20)], "\n"))
		return false
	}
	return true
}
