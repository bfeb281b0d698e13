package outboxsqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "modernc.org/sqlite"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/storetest"
)

func TestConformanceWithOpen(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return harness(t, newStore(t, outboxsqlite.Options{}))
	})
}

// A *sql.DB the application opened itself, with plain deferred transactions
// (no _txlock): the Store's own transactions must not depend on it.
func TestConformanceWithNew(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		path := dbPath(t)
		db, err := sql.Open("sqlite", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		opts := outboxsqlite.Options{Table: "events"}
		m, err := outboxsqlite.NewMigrator(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(t.Context()); err != nil {
			t.Fatal(err)
		}
		store, err := outboxsqlite.New(db, opts)
		if err != nil {
			t.Fatal(err)
		}
		return harness(t, store)
	})
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  outboxsqlite.Options
		field string
		value string
	}{
		{"upper-case table", outboxsqlite.Options{Table: "Outbox"}, "Options.Table", "Outbox"},
		{"table starting with a digit", outboxsqlite.Options{Table: "1st"}, "Options.Table", "1st"},
		{"table with a quote", outboxsqlite.Options{Table: `x"; DROP TABLE users; --`}, "Options.Table", "DROP TABLE"},
		{"table with a dot", outboxsqlite.Options{Table: "main.outbox"}, "Options.Table", "main.outbox"},
		{"table of 41 bytes", outboxsqlite.Options{Table: strings.Repeat("t", 41)}, "Options.Table", strings.Repeat("t", 41)},
		{"table reserved by SQLite", outboxsqlite.Options{Table: "sqlite_outbox"}, "Options.Table", "sqlite_outbox"},
		{"table with non-ASCII letters", outboxsqlite.Options{Table: "ausgangskörbchen"}, "Options.Table", "ausgangsk"},
		{"negative busy timeout", outboxsqlite.Options{BusyTimeout: -time.Second}, "Options.BusyTimeout", "-1s"},
		{"watch interval under 1ms", outboxsqlite.Options{WatchInterval: time.Microsecond}, "Options.WatchInterval", "1µs"},
		{"watch interval over 10s", outboxsqlite.Options{WatchInterval: time.Minute}, "Options.WatchInterval", "1m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check := func(what string, err error) {
				t.Helper()
				var ce *outbox.ConfigError
				if !errors.As(err, &ce) || !errors.Is(err, outbox.ErrInvalidConfig) {
					t.Fatalf("%s(%+v): error %v; want an *outbox.ConfigError", what, tt.opts, err)
				}
				if !strings.Contains(ce.Field, tt.field) || !strings.Contains(fmt.Sprint(ce.Value), tt.value) || ce.Fix == "" {
					t.Fatalf("%s(%+v): %q; want it to name the field %s, the value %q and the fix", what, tt.opts, err, tt.field, tt.value)
				}
			}
			_, err := outboxsqlite.New(&sql.DB{}, tt.opts)
			check("New", err)
			_, err = outboxsqlite.NewMigrator(nil, tt.opts)
			check("NewMigrator", err)
			path := dbPath(t)
			_, err = outboxsqlite.Open(t.Context(), path, tt.opts)
			check("Open", err)
		})
	}
	if _, err := outboxsqlite.New(nil, outboxsqlite.Options{}); err == nil {
		t.Fatalf("New(nil): no error; want one")
	}
}

func TestNameIsMainDotTable(t *testing.T) {
	t.Parallel()
	for opts, want := range map[outboxsqlite.Options]string{
		{}:                      "main.outbox",
		{Table: "order_events"}: "main.order_events",
		{Table: "order"}:        "main.order",
	} {
		s, err := outboxsqlite.New(&sql.DB{}, opts)
		if err != nil {
			t.Fatalf("New(%+v): %v", opts, err)
		}
		if s.Name() != want {
			t.Fatalf("Name of %+v: %q; want %q", opts, s.Name(), want)
		}
	}
}

func TestExchangeIsAtomic(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	ctx := t.Context()

	// A trigger makes claims with one particular token fail.
	refused := uuid.MustParse("ffffffff-ffff-4fff-bfff-ffffffffffff")
	_, err := store.DB().ExecContext(ctx, fmt.Sprintf(`
CREATE TRIGGER refuse_claim BEFORE UPDATE OF lease_token ON outbox
WHEN NEW.lease_token = '%s'
BEGIN SELECT RAISE(ABORT, 'claim refused by the test'); END`, refused))
	if err != nil {
		t.Fatalf("create trigger: %v", err)
	}

	w := newWriter(t, store)
	msgs := []*outbox.Message{{Topic: "a"}, {Topic: "b"}, {Topic: "c"}}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write: %v", err)
	}
	token := uuid.New()
	if got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 2, Lease: time.Minute, Token: token}); err != nil || len(got) != 2 {
		t.Fatalf("claim: %d, %v; want 2 messages", len(got), err)
	}

	settle := outboxdriver.Settlement{Token: token, Published: []uuid.UUID{msgs[0].ID}, Dead: []outboxdriver.Failure{{ID: msgs[1].ID, Error: "x"}}}
	_, err = store.SettleAndClaim(ctx, settle, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: refused})
	if err == nil || !strings.Contains(err.Error(), "claim refused by the test") {
		t.Fatalf("exchange with a failing claim: %v; want the trigger's error", err)
	}
	if _, err := store.Get(ctx, msgs[0].ID); err != nil {
		t.Fatalf("message %s was deleted although its exchange failed: %v", msgs[0].ID, err)
	}
	if m, _ := store.Get(ctx, msgs[1].ID); m.Status != outbox.StatusPending || m.Attempts != 0 {
		t.Fatalf("message %s: status %q, attempts %d although its exchange failed; want pending, 0", msgs[1].ID, m.Status, m.Attempts)
	}
	got, err := store.SettleAndClaim(ctx, settle, outboxdriver.Claim{Limit: 5, Lease: time.Minute, Token: uuid.New()})
	if err != nil || len(got) != 1 || got[0].ID != msgs[2].ID {
		t.Fatalf("exchange: %v, %v; want message %s claimed", got, err, msgs[2].ID)
	}
}

// An idle relay's claims find nothing; they must not take the write lock
// that the application's commits need.
func TestClaimWithNothingDueOnlyReads(t *testing.T) {
	t.Parallel()
	log := &statementLog{}
	store := openMigrated(t, dbPath(t), outboxsqlite.Options{}, log)
	ctx := t.Context()
	w := newWriter(t, store)
	scheduled := &outbox.Message{Topic: "later", AvailableAt: time.Now().Add(time.Hour)}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, scheduled) }); err != nil {
		t.Fatal(err)
	}
	before := len(log.all())
	for range 3 {
		if got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: uuid.New()}); err != nil || len(got) != 0 {
			t.Fatalf("claim: %v, %v; want nothing", got, err)
		}
	}
	sent := log.all()[before:]
	if len(sent) != 3 {
		t.Fatalf("3 empty claims sent %q; want one read each", sent)
	}
	for _, q := range sent {
		if !strings.HasPrefix(q, "SELECT EXISTS") {
			t.Fatalf("an empty claim sent %q; want only a read-only SELECT", q)
		}
	}
}

func TestInsertTxWritesManyMessages(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	w := newWriter(t, store)
	ctx := t.Context()
	const n = 1234 // several INSERT chunks and a remainder
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "orders.created", Key: fmt.Sprint(i % 7), Payload: []byte(fmt.Sprint(i)),
			Headers: map[string]string{"n": fmt.Sprint(i)}}
	}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatalf("write %d messages: %v", n, err)
	}
	st, err := store.Stats(ctx)
	if err != nil || st.Pending != n {
		t.Fatalf("stats: %+v, %v; want %d pending", st, err, n)
	}
	for _, i := range []int{0, 99, 100, n - 1} {
		m, err := store.Get(ctx, msgs[i].ID)
		if err != nil || string(m.Payload) != fmt.Sprint(i) || m.Headers["n"] != fmt.Sprint(i) {
			t.Fatalf("message %d (%s): %+v, %v; want payload and header %d", i, msgs[i].ID, m, err, i)
		}
	}
}

func TestInsertTxRejectsMessagesWithoutID(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	err := store.RunInTx(t.Context(), func(tx *sql.Tx) error {
		return store.InsertTx(t.Context(), tx, []*outbox.Message{{Topic: "orders.created"}})
	})
	if err == nil || !strings.Contains(err.Error(), "no ID") {
		t.Fatalf("insert of a message without ID: %v; want an error saying it has no ID", err)
	}
}

func TestRunInTxRollsBackOnPanic(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	w := newWriter(t, store)
	m := &outbox.Message{Topic: "orders.created"}
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v; want the panic value boom", r)
			}
		}()
		_ = store.RunInTx(t.Context(), func(tx *sql.Tx) error {
			if err := w.Write(t.Context(), tx, m); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if _, err := store.Get(t.Context(), m.ID); !errors.Is(err, outbox.ErrNotFound) {
		t.Fatalf("message %s written before a panic: %v; want ErrNotFound (rolled back)", m.ID, err)
	}
	// The panic released the write queue: the next write goes through.
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		return w.Write(t.Context(), tx, &outbox.Message{Topic: "next"})
	}); err != nil {
		t.Fatalf("write after the panic: %v", err)
	}
}

// The application's own transaction: business rows and messages commit or
// roll back together.
func TestWriteInTheApplicationsTransaction(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{Table: "order"}) // a keyword, quoted
	db := store.DB()
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT)`); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, store)
	for i, commit := range []bool{true, false} {
		m := &outbox.Message{Topic: "orders.paid", Key: fmt.Sprint(i), Payload: []byte{1, 2, 3}}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, 'paid')`, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, tx, m); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		var orders int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders WHERE id = ?`, fmt.Sprint(i)).Scan(&orders); err != nil {
			t.Fatal(err)
		}
		_, err = store.Get(ctx, m.ID)
		switch {
		case commit && (err != nil || orders != 1):
			t.Fatalf("committed: order rows %d, message %s: %v; want both stored", orders, m.ID, err)
		case !commit && (!errors.Is(err, outbox.ErrNotFound) || orders != 0):
			t.Fatalf("rolled back: order rows %d, message %s: %v; want neither", orders, m.ID, err)
		}
	}
}

func TestPurgePublishedLetsOneCallerAtATimeWork(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	ctx := t.Context()
	w := newWriter(t, store)
	const n = 50
	msgs := make([]*outbox.Message, n)
	for i := range msgs {
		msgs[i] = &outbox.Message{Topic: "kept"}
	}
	if err := w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	got, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: n, Lease: time.Minute, Token: token})
	if err != nil || len(got) != n {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	published := make([]uuid.UUID, n)
	for i := range got {
		published[i] = got[i].ID
	}
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: published, KeepPublished: true}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}

	// Hold the write lock from another connection, as another process would:
	// purges wait behind it (never overlapping), and the ones that find this
	// Store already purging give up at once.
	conn, err := store.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	const callers = 4
	results := make(chan int, callers)
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			n, err := store.PurgePublished(ctx, 0, n)
			if err != nil {
				t.Errorf("purge: %v", err)
			}
			results <- n
		})
	}
	// While the lock is held, all callers but one must give up at once;
	// the one left waits for the lock. Only then is it released, so the
	// callers overlapped however slowly they started.
	var early []int
	giveUp := time.After(30 * time.Second)
	for len(early) < callers-1 {
		select {
		case r := <-results:
			early = append(early, r)
		case <-giveUp:
			if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
				t.Error(err)
			}
			wg.Wait()
			t.Fatalf("while another connection held the write lock, %d of %d concurrent purges returned within 30s; want all but one to give up at once", len(early), callers)
		}
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	var total, working int
	for _, r := range early {
		total += r
		if r > 0 {
			t.Errorf("a purge deleted %d messages while another connection held the write lock", r)
		}
	}
	for r := range results {
		total += r
		if r > 0 {
			working++
		}
	}
	if total != n || working != 1 {
		t.Fatalf("%d concurrent purges deleted %d messages in total, %d of them deleting any; want all %d deleted by one", callers, total, working, n)
	}
}

func TestAdminRejectsBadLimits(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	ctx := t.Context()
	if _, err := store.ListDead(ctx, uuid.Nil, 0); err == nil {
		t.Fatalf("ListDead with limit 0: no error; want one")
	}
	if _, err := store.PurgePublished(ctx, 0, 0); err == nil {
		t.Fatalf("PurgePublished with limit 0: no error; want one")
	}
	if _, err := store.PurgePublished(ctx, -time.Second, 1); err == nil {
		t.Fatalf("PurgePublished with a negative age: no error; want one")
	}
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1}); err == nil {
		t.Fatalf("SettleAndClaim with a zero lease: no error; want one")
	}
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: -1}); err == nil {
		t.Fatalf("SettleAndClaim with a negative limit: no error; want one")
	}
	if n, err := store.DiscardDead(ctx); err != nil || n != 0 {
		t.Fatalf("DiscardDead with no ids: %d, %v; want 0, nil (nothing discarded)", n, err)
	}
}

// The claim and the idle probe must read the partial index of pending rows,
// not the table: with retention on, published rows may outnumber them by far.
func TestQueriesUseThePendingIndex(t *testing.T) {
	t.Parallel()
	store := newStore(t, outboxsqlite.Options{})
	for what, q := range map[string]string{
		"claim": `SELECT id FROM outbox WHERE status = 'pending' AND available_at <= 1 AND (locked_until IS NULL OR locked_until <= 1) ORDER BY available_at, id LIMIT 10`,
		"probe": `SELECT min(available_at) FROM outbox WHERE status = 'pending' AND locked_until IS NULL`,
	} {
		rows, err := store.DB().QueryContext(context.Background(), `EXPLAIN QUERY PLAN `+q)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, "outbox_pending_idx") || strings.Contains(p, "TEMP B-TREE") {
			t.Fatalf("%s plan: %s; want it to read outbox_pending_idx in order", what, p)
		}
	}
}
