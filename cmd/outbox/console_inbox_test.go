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
	table, err := outboxsqlite.NewInboxTable(store, "")
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
	poison := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Payload: []byte("{}")}
	if err := table.Park(t.Context(), "billing", poison, 5, "tax service says 500 (injected)"); err != nil {
		t.Fatal(err)
	}

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
