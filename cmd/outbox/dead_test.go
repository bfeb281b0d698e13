package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

func TestDeadRetryOfAMessageItsKeyWentOnPastAsksForForceOnPostgreSQL(t *testing.T) {
	t.Parallel()
	db, store := skippingDeadOnPostgreSQL(t)
	testDeadRetryKeepsKeyOrder(t, db, store, store)
}

func TestDeadRetryOfAMessageItsKeyWentOnPastAsksForForceOnSQLite(t *testing.T) {
	t.Parallel()
	db, store := skippingDeadOnSQLite(t)
	testDeadRetryKeepsKeyOrder(t, db, store, store)
}

// skippingDead is a store as a relay that skips dead messages in key order
// has it: it claims and settles, and it is the table's Admin.
type skippingDead interface {
	outboxdriver.Store
	outboxdriver.Admin
}

// skippingDeadOnPostgreSQL migrates a table in a fresh schema with the CLI
// and returns the CLI's database flags for it and a store on it that orders
// by key and skips dead messages.
func skippingDeadOnPostgreSQL(t *testing.T) ([]string, skippingDead) {
	schema := pgtest.Schema(t)
	db := []string{"--database-url", pgtest.URL(t), "--schema", schema}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	store, err := outboxpg.New(pgtest.Pool(t), outboxpg.Options{Schema: schema, OrderByKey: true, SkipDeadInKeyOrder: true})
	if err != nil {
		t.Fatal(err)
	}
	return db, store
}

// skippingDeadOnSQLite is skippingDeadOnPostgreSQL on an SQLite file.
func skippingDeadOnSQLite(t *testing.T) ([]string, skippingDead) {
	path := filepath.Join(t.TempDir(), "app.db")
	db := []string{"--database-url", "sqlite://" + path}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{OrderByKey: true, SkipDeadInKeyOrder: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return db, store
}

// testDeadRetryKeepsKeyOrder: a relay that skips dead messages in key
// order published two later messages of order-1 past its dead message;
// `dead list` and `dead show` say so, and `dead retry` (by id or --all)
// refuses to publish it after them unless --force is given, saying how
// many overtook it. A dead message nothing overtook is retried as before.
// store claims and settles as such a relay does (OrderByKey,
// SkipDeadInKeyOrder); admin reads the table.
func testDeadRetryKeepsKeyOrder(t *testing.T, db []string, store outboxdriver.Store, admin outboxdriver.Admin) {
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	send := func(key string) uuid.UUID {
		t.Helper()
		out := strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders", "--key", key, "--payload", `{}`)...))
		id, err := uuid.Parse(out)
		if err != nil {
			t.Fatalf("send printed %q; want a message id", out)
		}
		return id
	}
	paid, other, shipped, cancelled := send("order-1"), send("order-2"), send("order-1"), send("order-1")
	// One message at a time, oldest first, as a relay in key order:
	// order-1's first dies and the key goes on past it; order-2's dies
	// with nothing after it.
	settle := func(id uuid.UUID, dead bool) {
		t.Helper()
		token := uuid.New()
		got, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 1, Lease: time.Minute, Token: token})
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("claim one message: %v, %v; want %s", got, err, id)
		}
		s := outboxdriver.Settlement{Token: token, Published: []uuid.UUID{got[0].ID}}
		if dead {
			s = outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: got[0].ID, Error: "rejected"}}}
		}
		if _, err := store.SettleAndClaim(t.Context(), s, outboxdriver.Claim{}); err != nil {
			t.Fatal(err)
		}
	}
	settle(paid, true)
	settle(other, true)
	settle(shipped, false)
	settle(cancelled, false)

	if out := mustCLI(t, with("dead", "list")...); !strings.Contains(out, "overtaken by 2") || strings.Count(out, "overtaken by") != 1 {
		t.Fatalf("dead list printed %q; want %s shown overtaken by 2, and only it", out, paid)
	}
	var shown struct {
		Overtaken int `json:"overtaken"`
	}
	if err := json.Unmarshal([]byte(mustCLI(t, with("dead", "show", paid.String())...)), &shown); err != nil || shown.Overtaken != 2 {
		t.Fatalf("dead show %s: %+v, %v; want overtaken 2", paid, shown, err)
	}

	for _, args := range [][]string{{paid.String()}, {other.String(), paid.String()}, {"--all"}} {
		code, out, errOut := cli(t, with(append([]string{"dead", "retry"}, args...)...)...)
		if code != 1 || !strings.Contains(errOut, paid.String()) || !strings.Contains(errOut, `"order-1"`) ||
			!strings.Contains(errOut, "2 later message(s)") || !strings.Contains(errOut, "--force") || strings.Contains(errOut, other.String()) {
			t.Fatalf("dead retry %v of a message 2 later messages of its key overtook: exit %d, stdout %q, stderr %q; want exit 1 naming it, its key, the count and --force, and not %s", args, code, out, errOut, other)
		}
	}
	consoleRefusesOutOfOrderRetry(t, admin, nil, "/dead/"+paid.String()+"/retry", url.Values{}, paid, "outbox dead retry --force")
	for _, id := range []uuid.UUID{paid, other} {
		if m, err := admin.Get(t.Context(), id); err != nil || m.Status != outbox.StatusDead {
			t.Fatalf("message %s after refused retries: %+v, %v; want it still dead", id, m, err)
		}
	}
	if out := mustCLI(t, with("dead", "retry", other.String())...); !strings.Contains(out, "1 message(s) pending again") {
		t.Fatalf("dead retry of a message nothing overtook printed %q", out)
	}
	if out := mustCLI(t, with("dead", "retry", "--force", paid.String())...); !strings.Contains(out, "1 message(s) pending again") {
		t.Fatalf("dead retry --force printed %q", out)
	}
	if m, err := admin.Get(t.Context(), paid); err != nil || m.Status != outbox.StatusPending {
		t.Fatalf("message %s after dead retry --force: %+v, %v; want it pending", paid, m, err)
	}
}

// consoleRefusesOutOfOrderRetry posts the console's retry form at path for
// id, which later messages of its key overtook: the console has no --force,
// so it must answer 409 naming the message and the CLI command that forces
// the retry.
func consoleRefusesOutOfOrderRetry(t *testing.T, admin outboxdriver.Admin, inbox inboxTable, path string, form url.Values, id uuid.UUID, force string) {
	t.Helper()
	c, err := newConsole(admin, inbox, "outbox", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	form.Set("csrf", c.csrf)
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	c.handler().ServeHTTP(rec, req)
	if body := rec.Body.String(); rec.Code != http.StatusConflict || !strings.Contains(body, id.String()) || !strings.Contains(body, force) {
		t.Fatalf("console POST %s of a message later messages of its key overtook: %d %q; want 409 naming %s and %q", path, rec.Code, body, id, force)
	}
}
