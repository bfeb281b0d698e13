package main

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/relaytest"
)

// The Inbox page shows each consumer's records, the duplicates it skipped
// and what it parked; the parked page lists them, and its Retry (a POST with
// the form token) hands them back to the running consumer.
func TestConsoleShowsTheInboxAndRetriesParkedMessages(t *testing.T) {
	t.Parallel()
	table, poison := parkedInbox(t)
	c, err := newConsole(&fakeAdmin{}, table, "main.outbox", relaytest.TestLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	page := get(t, srv.URL+"/inbox")
	for _, want := range []string{`id="c-billing"`, `<td class="records">1</td>`, `<td class="duplicates">1</td>`, `/inbox/parked?consumer=billing">1</a>`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Inbox page lacks %s:\n%s", want, page)
		}
	}
	page = get(t, srv.URL+"/inbox/parked?consumer=billing")
	if !strings.Contains(page, poison.ID.String()) || !strings.Contains(page, "tax service says 500") {
		t.Fatalf("the parked page lacks the parked message and its error:\n%s", page)
	}

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	retry := func(form url.Values) int {
		resp, err := noRedirect.PostForm(srv.URL+"/inbox/parked/retry", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := retry(url.Values{"consumer": {"billing"}, "id": {poison.ID.String()}}); code != http.StatusForbidden {
		t.Fatalf("retry without the form token: %d; want 403", code)
	}
	if taken, err := table.TakeRetries(t.Context(), "billing", 10); err != nil || len(taken) != 0 {
		t.Fatalf("after a refused retry the consumer would take %v, %v; want nothing", taken, err)
	}
	if code := retry(url.Values{"csrf": {c.csrf}, "consumer": {"billing"}, "id": {poison.ID.String()}}); code != http.StatusSeeOther {
		t.Fatalf("retry with the form token: %d; want 303", code)
	}
	taken, err := table.TakeRetries(t.Context(), "billing", 10)
	if err != nil || len(taken) != 1 || taken[0].ID != poison.ID {
		t.Fatalf("after Retry the consumer takes %v, %v; want the parked message", taken, err)
	}
	// The consumer has it in its handler: a second Retry is refused with
	// the command that takes it back, not the --force of overtaken ones.
	resp, err := noRedirect.PostForm(srv.URL+"/inbox/parked/retry", url.Values{"csrf": {c.csrf}, "consumer": {"billing"}, "id": {poison.ID.String()}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	take := "outbox inbox parked retry --consumer billing --taken " + poison.ID.String()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), take) || strings.Contains(string(body), "--force") {
		t.Fatalf("retry of a message in a handler: %d, %q; want 409 naming %q", resp.StatusCode, body, take)
	}
}

// parkedInbox is an SQLite inbox table where consumer billing applied one
// message twice (the second a duplicate) and parked poison.
func parkedInbox(t *testing.T) (table *outboxsqlite.InboxTable, poison outbox.Message) {
	t.Helper()
	store, err := outboxsqlite.Open(t.Context(), filepath.Join(t.TempDir(), "app.db"), outboxsqlite.Options{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	m, err := outboxsqlite.NewMigrator(store.DB(), outboxsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	table, err = outboxsqlite.NewInboxTable(store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	in, err := outbox.NewInbox(table, "billing")
	if err != nil {
		t.Fatal(err)
	}
	applied := uuid.Must(uuid.NewV7())
	for range 2 { // the second delivery is a duplicate
		if _, err := in.Handle(t.Context(), applied, func(context.Context, *sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	poison = outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Payload: []byte("{}")}
	if err := table.Park(t.Context(), "billing", poison, 5, "tax service says 500 (injected)"); err != nil {
		t.Fatal(err)
	}
	return table, poison
}

// A read-only console refuses a parked retry with 403, the consumer takes
// nothing, the refusal is audited, and the pages say read-only and offer
// no Retry.
func TestConsoleReadOnlyRefusesParkedRetryAndChangesNothing(t *testing.T) {
	t.Parallel()
	table, poison := parkedInbox(t)
	log, lines := captureLog(t)
	c, err := newConsole(&fakeAdmin{}, table, "main.outbox", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.readOnly = true
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	for _, page := range []string{"/inbox", "/inbox/parked?consumer=billing"} {
		body := get(t, srv.URL+page)
		if !strings.Contains(body, "read-only") || strings.Contains(body, `method="post"`) {
			t.Errorf("page %s of a read-only console: want it to say read-only and hold no form that changes anything:\n%s", page, body)
		}
	}
	code, body := postForm(t, srv.URL+"/inbox/parked/retry", "", url.Values{"csrf": {c.csrf}, "consumer": {"billing"}, "id": {poison.ID.String()}})
	if code != http.StatusForbidden || !strings.Contains(body, "the console runs read-only") {
		t.Errorf("parked retry on a read-only console: %d %q; want 403 saying the console runs read-only", code, body)
	}
	if taken, err := table.TakeRetries(t.Context(), "billing", 10); err != nil || len(taken) != 0 {
		t.Fatalf("after a refused retry the consumer would take %v, %v; want nothing", taken, err)
	}
	if audit := lines.records(t, "outbox console: audit"); len(audit) != 1 || audit[0]["outcome"] != "refused" || audit[0]["action"] != "retry-parked" {
		t.Errorf("audit lines %v; want one, of the refused retry-parked", audit)
	}
}

// A parked retry asked with the bearer token is audited as "bearer", with
// the consumer, the parked table, the ids and the outcome.
func TestConsoleAuditsAParkedRetryWithTheIDsAndWho(t *testing.T) {
	t.Parallel()
	table, poison := parkedInbox(t)
	auth, err := parseConsoleAuth([]string{"bearer:" + writeFile(t, "token", testToken)})
	if err != nil {
		t.Fatal(err)
	}
	log, lines := captureLog(t)
	c, err := newConsole(&fakeAdmin{}, table, "main.outbox", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.auth = auth
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/inbox/parked/retry", strings.NewReader(url.Values{"csrf": {c.csrf}, "consumer": {"billing"}, "id": {poison.ID.String()}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("parked retry with the token: %d; want 303", resp.StatusCode)
	}
	audit := lines.records(t, "outbox console: audit")
	if len(audit) != 1 {
		t.Fatalf("%d audit lines for one parked retry; want 1", len(audit))
	}
	r := audit[0]
	ids, _ := r["ids"].([]any)
	if r["level"] != "INFO" || r["audit"] != true || r["user"] != "bearer" || !strings.HasPrefix(r["remote"].(string), "127.0.0.1:") || r["action"] != "retry-parked" ||
		r["table"] != table.ParkedName() || r["consumer"] != "billing" || len(ids) != 1 || ids[0] != poison.ID.String() || r["outcome"] != "done" || r["changed"] != 1.0 {
		t.Errorf("audit line %v; want INFO, audit=true, user bearer, the remote address, action retry-parked, table %s, consumer billing, ids [%s], outcome done, changed 1", r, table.ParkedName(), poison.ID)
	}
}
