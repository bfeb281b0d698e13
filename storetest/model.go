package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// ModelHarness is a Harness for RunModel, with the ways the model reaches
// the table from outside the store, as an operator or another program
// would. Every hook is optional: nil leaves its operation out of the runs.
type ModelHarness struct {
	Harness
	// KillConnections ends the server sessions of the store's connections,
	// as a database restart or a network failure would (PostgreSQL's
	// pg_terminate_backend), and makes the store's pool drop them. With
	// transaction leases this rolls back every open claim.
	KillConnections func(ctx context.Context) error
	// Reschedule sets the due time of the rows of ids to at, as an
	// operator's UPDATE would, leaving the lease columns alone. The model
	// never passes rows held in an open transaction.
	Reschedule func(ctx context.Context, ids []uuid.UUID, at time.Time) error
	// Rows reads every row of the table, whatever its status, from outside
	// the store's transactions. Nil: the model reads each message it knows
	// with Admin.Get, which is slower.
	Rows func(ctx context.Context) ([]outboxdriver.Message, error)
	// SetPayload overwrites the payload of a pending row, as an operator's
	// fix would. The model never passes a row held in an open transaction.
	SetPayload func(ctx context.Context, id uuid.UUID, payload []byte) error
	// Touch updates the rows of ids without changing a value
	// (SET available_at = available_at): in PostgreSQL each gets a new
	// row version at a new address. The model never passes rows held in
	// an open transaction.
	Touch func(ctx context.Context, ids []uuid.UUID) error
	// Vacuum vacuums the table (full: rewrites it, VACUUM FULL).
	Vacuum func(ctx context.Context, full bool) error
	// HeldClaimsKeepTheNextEntry says that a claim held in a transaction
	// that read past its due rows (it returned fewer than its limit) keeps
	// a lock on the next entry of the index it read until it ends, as
	// MariaDB's locking reads do: a message that becomes due meanwhile is
	// passed over by other claims and NextDue until that claim ends. The
	// model then lets them miss such a message (outboxmysql documents it).
	HeldClaimsKeepTheNextEntry bool
}

// Environment variables of the model runs.
const (
	// EnvModelDuration runs each mode with fresh random seeds for this
	// long (a time.ParseDuration string, e.g. 10m) instead of the short run.
	EnvModelDuration = "OUTBOX_MODEL_DURATION"
	// EnvModelSeed replays one seed in each mode and prints its whole step
	// log if it fails.
	EnvModelSeed = "OUTBOX_MODEL_SEED"
	// EnvModelSteps sets the steps of each seed.
	EnvModelSteps = "OUTBOX_MODEL_STEPS"
)

// Sizes of the model runs.
const (
	modelShortSteps = 70  // per seed of the short run: three seeds, about 200 steps per mode
	modelLongSteps  = 400 // per seed of a long run or a replay
	modelLogTail    = 50  // steps printed when a seed fails
)

// modelShortSeeds are replayed by every short run, followed by one random
// seed.
var modelShortSeeds = []uint64{1, 2}

// RunModel runs random sequences of operations against the store and
// checks the table after every step against a model of what the store
// promises (the contract of outboxdriver): writes, rolled-back writes,
// claims from several relays with short and long leases, settlements of
// every outcome (whole, partial and late), releases, the Admin operations,
// purges, and the harness's outside operations. It runs each sequence
// through Store, through KeyOrdered (a dead message holds the rest of its
// key) and through KeyOrderedSkippingDead (it does not), those that are
// set.
//
// By default it runs the seeds of modelShortSeeds and one random seed, a
// few hundred steps in all per mode; see EnvModelDuration and EnvModelSeed
// for longer runs and replays. newHarness is called once per seed.
func RunModel(t *testing.T, newHarness func(t *testing.T) ModelHarness) {
	t.Helper()
	cfg := modelConfigFromEnv(t)
	for _, mode := range []modelMode{modeUnordered, modeKeyOrder, modeKeyOrderSkippingDead} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			runSeed := func(seed uint64) {
				t.Run(fmt.Sprintf("seed %d", seed), func(t *testing.T) {
					h := newHarness(t)
					if h.Store == nil || h.Admin == nil || h.Write == nil || h.WriteRollback == nil {
						t.Fatalf("storetest: the harness must set Store, Admin, Write and WriteRollback")
					}
					if mode.store(h.Harness) == nil {
						t.Skipf("the harness sets no store for %s", mode)
					}
					runModelSeed(t, h, mode, seed, cfg)
				})
			}
			switch {
			case cfg.replay:
				runSeed(cfg.seed)
			case cfg.duration > 0:
				deadline := time.Now().Add(cfg.duration)
				for time.Now().Before(deadline) && !t.Failed() {
					runSeed(rand.Uint64())
				}
			default:
				for _, seed := range modelShortSeeds {
					runSeed(seed)
				}
				seed := rand.Uint64()
				t.Logf("random seed %d (replay with %s=%d)", seed, EnvModelSeed, seed)
				runSeed(seed)
			}
		})
	}
}

// modelMode is the store a run claims through.
type modelMode int

const (
	modeUnordered modelMode = iota
	modeKeyOrder
	modeKeyOrderSkippingDead
)

func (m modelMode) String() string {
	return [...]string{"unordered", "key order", "key order skipping dead"}[m]
}

func (m modelMode) store(h Harness) outboxdriver.Store {
	return [...]outboxdriver.Store{h.Store, h.KeyOrdered, h.KeyOrderedSkippingDead}[m]
}

type modelConfig struct {
	duration time.Duration
	replay   bool
	seed     uint64
	steps    int
}

func modelConfigFromEnv(t *testing.T) modelConfig {
	t.Helper()
	cfg := modelConfig{steps: modelShortSteps}
	if v := os.Getenv(EnvModelDuration); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvModelDuration, v, err)
		}
		cfg.duration, cfg.steps = d, modelLongSteps
	}
	if v := os.Getenv(EnvModelSeed); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvModelSeed, v, err)
		}
		cfg.replay, cfg.seed, cfg.steps = true, seed, modelLongSteps
	}
	if v := os.Getenv(EnvModelSteps); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive number", EnvModelSteps, v)
		}
		cfg.steps = n
	}
	return cfg
}

// runModelSeed runs one seed's steps and fails t, with the seed and the
// last steps, at the first broken invariant.
func runModelSeed(t *testing.T, h ModelHarness, mode modelMode, seed uint64, cfg modelConfig) {
	r := newModelRun(t.Context(), h, mode, seed)
	t.Cleanup(r.endAll)
	var err error
	for r.step = 1; r.step <= cfg.steps && err == nil; r.step++ {
		if err = r.endLeases(); err == nil {
			if err = r.randomStep(); err == nil {
				err = r.check()
			}
		}
	}
	if err == nil {
		return
	}
	log := r.log
	if !cfg.replay && len(log) > modelLogTail {
		log = log[len(log)-modelLogTail:]
	}
	t.Fatalf("model of the store contract, %s, seed %d: step %d: %v\n(replay: %s=%d go test -run '%s')\nsteps:\n%s",
		r.modeName(), seed, r.step, err, EnvModelSeed, seed, t.Name(), strings.Join(log, "\n"))
}
