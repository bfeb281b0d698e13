package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// buildCLI returns the outbox command, built once per test binary.
func buildCLI() (string, error) { return clitest.Build() }

// processDB is a migrated outbox table for tests that run relay processes:
// how the processes reach it, and how this process writes to it and reads
// its counts.
type processDB struct {
	// url is the --database-url of the relay processes.
	url string
	// args are further global flags, e.g. --schema.
	args []string
	// write commits msgs in one transaction.
	write func(ctx context.Context, msgs []*outbox.Message) error
	// stats reads the table's counts.
	stats func(ctx context.Context) (outboxdriver.Stats, error)
	// store is the table's store in this process, for tests that set up
	// what the relays would (dead messages and their history, say).
	store testStore
}

// testStore is what tests do to a table through its store.
type testStore interface {
	outboxdriver.Store
	outboxdriver.Admin
	outboxdriver.AttemptRecorder
	outboxdriver.Replayer
}

// postgresDB returns a migrated table in a fresh schema of the test server.
func postgresDB(t *testing.T) processDB {
	t.Helper()
	ctx := context.Background()
	url := pgtest.URL(t)
	schema := pgtest.Schema(t)
	pool := pgtest.Pool(t)
	opts := outboxpg.Options{Schema: schema}
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	migrator, err := outboxpg.NewMigrator(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Up(ctx); err != nil {
		t.Fatal(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return processDB{
		url:  url,
		args: []string{"--schema", schema},
		write: func(ctx context.Context, msgs []*outbox.Message) error {
			return writer.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return writer.Write(ctx, tx, msgs...) })
		},
		stats: store.Stats,
		store: store,
	}
}

// startRelayProcess starts `outbox relay` on db, publishing to out, with the
// given relay flags. The process is killed when the test ends, and its
// stderr shown if the test failed.
func startRelayProcess(t *testing.T, bin string, db processDB, out *os.File, flags ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"relay", "--database-url", db.url}, db.args...)
	cmd := exec.Command(bin, append(args, flags...)...)
	cmd.Stdout = out
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("relay %d stderr:\n%s", cmd.Process.Pid, stderr.String())
		}
	})
	return cmd
}

// TestRelayProcessKilledMidRunLosesNothing writes messages from this process
// while relay processes publish them to a file; relays are killed with SIGKILL
// at random moments and restarted. In the end every committed message is in
// the file, and the only duplicates are messages of batches in flight at a
// kill, at most kills x workers x batch size of them.
func TestRelayProcessKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	testRelayProcessKilledMidRunLosesNothing(t, postgresDB(t))
}

func testRelayProcessKilledMidRunLosesNothing(t *testing.T, db processDB) {
	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	const (
		total     = 12000
		perTx     = 20
		kills     = 3
		batchSize = 50
		workers   = 2
	)
	published := filepath.Join(t.TempDir(), "published.jsonl")
	out, err := os.OpenFile(published, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	startRelay := func() *exec.Cmd {
		return startRelayProcess(t, bin, db, out,
			"--batch-size", strconv.Itoa(batchSize), "--workers", strconv.Itoa(workers),
			"--lease", "2s", "--poll-interval", "50ms", "--log-level", "warn")
	}

	// Write in the background while relays run and die.
	written := make(chan []uuid.UUID, 1)
	writeErr := make(chan error, 1)
	go func() {
		var ids []uuid.UUID
		for i := 0; i < total; i += perTx {
			msgs := make([]*outbox.Message, perTx)
			for j := range msgs {
				msgs[j] = &outbox.Message{Topic: "crash", Key: strconv.Itoa(j % 7), Payload: fmt.Appendf(nil, `{"n":%d}`, i+j)}
			}
			if err := db.write(ctx, msgs); err != nil {
				writeErr <- err
				return
			}
			for _, m := range msgs {
				ids = append(ids, m.ID)
			}
			if i%1000 == 0 {
				time.Sleep(time.Duration(rand.IntN(50)) * time.Millisecond) // vary the pace
			}
		}
		written <- ids
	}()

	relay := startRelay()
	for k := range kills {
		// Kill once this relay has published something new, at a random moment.
		before := clitest.Lines(t, published)
		waitUntil(t, 60*time.Second, fmt.Sprintf("relay %d to publish", k+1), func() bool { return clitest.Lines(t, published) > before })
		time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
		if err := relay.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = relay.Wait()
		relay = startRelay()
	}
	var ids []uuid.UUID
	select {
	case ids = <-written:
	case err := <-writeErr:
		t.Fatalf("writer: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("writer did not finish")
	}
	waitUntil(t, 2*time.Minute, "the table to drain", func() bool {
		st, err := db.stats(ctx)
		return err == nil && st.Pending == 0
	})
	_ = relay.Process.Signal(syscall.SIGTERM)
	_ = relay.Wait()

	counts := clitest.Published(t, published)
	duplicates := 0
	for _, id := range ids {
		switch n := counts[id]; {
		case n == 0:
			t.Errorf("committed message %s was never published", id)
		case n > 1:
			duplicates += n - 1
		}
	}
	if len(counts) != len(ids) {
		t.Errorf("published %d distinct messages, committed %d", len(counts), len(ids))
	}
	bound := kills * workers * batchSize
	t.Logf("%d messages, %d kills: %d duplicates (bound %d)", len(ids), kills, duplicates, bound)
	if duplicates > bound {
		t.Fatalf("%d duplicates after %d kills, want at most %d (batches in flight at the kills)", duplicates, kills, bound)
	}
}

func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
