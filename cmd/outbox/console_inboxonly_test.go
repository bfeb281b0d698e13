package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// consoleLog is the console's standard error, which the test reads while
// the console writes it.
type consoleLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *consoleLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *consoleLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// startConsole runs `outbox console` with args on a free loopback port and
// returns its URL once it answers, and its log. It stops when the test
// ends, which fails if it exited with an error.
func startConsole(t *testing.T, args ...string) (base string, log *consoleLog) {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	log = &consoleLog{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"console", "--addr", addr}, args...), io.Discard, log) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("console exited %d: %s", code, log.String())
		}
	})
	base = "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(base + "/"); err == nil {
			resp.Body.Close()
			return base, log
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the console exited %d before it answered: %s", code, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console did not answer in 20s: %s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fetch answers method url (a POST with form), without following
// redirects.
func fetch(t *testing.T, method, url string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// csrfOf is the form token of a console page.
var csrfOf = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func TestConsoleStartsAgainstAnInboxOnlyDatabaseAndSaysItHasNoOutboxTable(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	poison := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Payload: []byte("{}")}
	if err := table.Park(t.Context(), "billing", poison, 5, "tax service says 500"); err != nil {
		t.Fatal(err)
	}
	testInboxOnlyConsole(t, poison.ID, "--database-url", pgtest.URL(t), "--schema", schema)
}

func TestSQLiteConsoleStartsAgainstAnInboxOnlyDatabaseAndSaysItHasNoOutboxTable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "consumer.db")
	// The consumer's file: opened as a store only to reach it; its outbox
	// table is never migrated.
	store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	table, err := outboxsqlite.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	poison := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Payload: []byte("{}")}
	if err := table.Park(t.Context(), "billing", poison, 5, "tax service says 500"); err != nil {
		t.Fatal(err)
	}
	testInboxOnlyConsole(t, poison.ID, "--database-url", "sqlite://"+path)
}

// testInboxOnlyConsole starts the console with db, a database with an inbox
// table where billing parked the message parked and no outbox table: the
// inbox pages work, the outbox pages say there is no outbox table and how
// to make one, and nothing answers 500.
func testInboxOnlyConsole(t *testing.T, parked uuid.UUID, db ...string) {
	base, log := startConsole(t, db...)
	id := uuid.Must(uuid.NewV7()).String()
	for _, path := range []string{"/", "/dead", "/dead?topic=x", "/dead/" + id, "/replay", "/replay?count=1&topic=x"} {
		code, page := fetch(t, http.MethodGet, base+path, nil)
		if code != http.StatusOK || !strings.Contains(page, "no outbox table") || !strings.Contains(page, "outbox migrate up") || !strings.Contains(page, "--table") {
			t.Errorf("GET %s: %d %q; want a page saying there is no outbox table, to run outbox migrate up or give --table", path, code, page)
		}
	}
	code, page := fetch(t, http.MethodGet, base+"/inbox", nil)
	if code != http.StatusOK || !strings.Contains(page, `id="c-billing"`) {
		t.Fatalf("GET /inbox: %d %q; want the consumer billing", code, page)
	}
	code, page = fetch(t, http.MethodGet, base+"/inbox/parked?consumer=billing", nil)
	if code != http.StatusOK || !strings.Contains(page, parked.String()) {
		t.Fatalf("GET the parked page: %d %q; want the parked message", code, page)
	}
	token := csrfOf.FindStringSubmatch(page)
	if token == nil {
		t.Fatalf("the parked page has no form token: %q", page)
	}
	if code, page = fetch(t, http.MethodGet, base+"/inbox/parked/"+parked.String()+"?consumer=billing", nil); code != http.StatusOK {
		t.Fatalf("GET the parked message: %d %q", code, page)
	}
	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "/dead/" + id + "/retry"},
		{http.MethodPost, "/dead/discard-matching"},
		{http.MethodPost, "/dead/groups/retry"},
		{http.MethodPost, "/replay/confirm"},
	} {
		code, page := fetch(t, req.method, base+req.path, url.Values{"csrf": {token[1]}, "seen": {"AAAAAAAAAAAAAAAAAAAAAA"}, "topic": {"x"}})
		if code >= 500 || code == http.StatusOK || !strings.Contains(page, "no outbox table") {
			t.Errorf("%s %s: %d %q; want a refusal (not a 500) saying there is no outbox table", req.method, req.path, code, page)
		}
	}
	if code, _ := fetch(t, http.MethodPost, base+"/inbox/parked/retry", url.Values{"csrf": {token[1]}, "consumer": {"billing"}, "id": {parked.String()}}); code != http.StatusSeeOther {
		t.Errorf("retry the parked message: %d; want 303", code)
	}
	if strings.Contains(log.String(), "request failed") {
		t.Errorf("the console logged a failed request:\n%s", log.String())
	}
}

// Without an outbox table and without an inbox table there is nothing to
// show: the console refuses to start, naming both.
func TestSQLiteConsoleRefusesADatabaseWithNeitherAnOutboxNorAnInboxTable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "empty.db")
	store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	code, _, errOut := cli(t, "console", "--addr", "127.0.0.1:0", "--database-url", "sqlite://"+path)
	if code == 0 || !strings.Contains(errOut, "outbox migrate up") || !strings.Contains(errOut, "inbox table") {
		t.Fatalf("console on an empty file: exit %d, %q; want a refusal naming the missing outbox and inbox tables", code, errOut)
	}
}
