package main

import (
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/relaytest"
)

func TestConsoleListsDeadGroupsWithWholeErrorsAndRetriesOrDiscardsExactlyAGroup(t *testing.T) {
	t.Parallel()
	testConsoleDeadGroups(t, postgresDB(t))
}

func TestSQLiteConsoleListsDeadGroupsWithWholeErrorsAndRetriesOrDiscardsExactlyAGroup(t *testing.T) {
	t.Parallel()
	testConsoleDeadGroups(t, sqliteProcessDB(t))
}

// longTail makes an error longer than a list cuts, ending with text the
// test looks for: the page must show it whole.
const longTail = "; the broker closed the connection before the handshake ended, which it does when its queue " +
	"is over its length limit or the user lacks the permission to publish on this exchange (END OF ERROR)"

// groupForm returns the fields of the retry/discard form of group id on
// the dead letters page.
func groupForm(t *testing.T, page, id string) url.Values {
	t.Helper()
	form := regexp.MustCompile(`(?s)<form[^>]*id="group-form-` + id + `".*?</form>`).FindString(page)
	if form == "" {
		t.Fatalf("the dead letters page has no form for group %s:\n%s", id, page)
	}
	v := url.Values{}
	for _, m := range regexp.MustCompile(`<input type="hidden" name="([a-z]+)" value="([^"]*)">`).FindAllStringSubmatch(form, -1) {
		v.Set(m[1], html.UnescapeString(m[2]))
	}
	return v
}

// testConsoleDeadGroups dead-letters messages failing in three ways and
// works on them through the dead letters page: the groups with their whole
// errors and links to their messages, a group retry refused once the group
// changed since the page was read, a group retry and a group discard that
// change exactly their group's rows, an audit line for each, and a
// read-only console that refuses them.
func testConsoleDeadGroups(t *testing.T, db processDB) {
	ctx := t.Context()
	var orders, invoices []*outbox.Message
	for i := range 3 {
		orders = append(orders, &outbox.Message{Topic: "orders", Key: fmt.Sprint("o", i), Payload: []byte("{}")})
	}
	for i := range 2 {
		invoices = append(invoices, &outbox.Message{Topic: "invoices", Key: fmt.Sprint("i", i), Payload: []byte("{}")})
	}
	refund := &outbox.Message{Topic: "refunds", Key: "r0", Payload: []byte("{}")}
	deadLetterAll(t, db, append(append(append([]*outbox.Message{}, orders...), invoices...), refund), func(i int, m *outbox.Message) string {
		switch m.Topic {
		case "orders":
			return fmt.Sprintf("attempt 12 of 12: dial tcp 10.0.0.%d:5672: connection refused%s", i+1, longTail)
		case "invoices":
			return "permanent failure: 312 NO_ROUTE for " + m.ID.String()
		}
		return "refund exceeds the charge"
	})
	groups, _, err := groupDead(ctx, db.store)
	if err != nil || len(groups) != 3 {
		t.Fatalf("groupDead: %d groups, %v; want 3", len(groups), err)
	}
	ordersGroup, invoicesGroup, refundsGroup := groups[0].ID, groups[1].ID, groups[2].ID

	log, lines := captureLog(t)
	c, err := newConsole(db.store, nil, "the.table", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)

	page := get(t, srv.URL+"/dead")
	for _, g := range groups {
		row := regexp.MustCompile(`(?s)<tr id="g-` + g.ID + `">.*?</tr>`).FindString(page)
		for _, want := range []string{g.Topic, string(g.Class), fmt.Sprintf(`class="count">%d<`, g.Count), html.EscapeString(g.Example),
			`href="/dead?group=` + g.ID + `"`} {
			if !strings.Contains(row, want) {
				t.Errorf("the row of group %s lacks %q:\n%s", g.ID, want, row)
			}
		}
	}
	if !strings.Contains(page, "END OF ERROR") {
		t.Fatalf("the dead letters page cuts the long error of the orders group:\n%s", page)
	}
	members := get(t, srv.URL+"/dead?group="+ordersGroup)
	if listed := regexp.MustCompile(`<tr id="m-`).FindAllString(members, -1); len(listed) != 3 || !strings.Contains(members, "3 matching dead message(s)") {
		t.Fatalf("the messages of the orders group: %d listed; want its 3:\n%s", len(listed), members)
	}
	for _, m := range orders {
		if !strings.Contains(members, `id="m-`+m.ID.String()+`"`) {
			t.Errorf("the messages of the orders group lack %s", m.ID)
		}
	}

	// One more message of the orders group dies after the page was read:
	// the page's retry is refused, and nothing changes.
	retryOrders := groupForm(t, page, ordersGroup)
	late := &outbox.Message{Topic: "orders", Key: "o9", Payload: []byte("{}")}
	deadLetterAll(t, db, []*outbox.Message{late}, func(int, *outbox.Message) string {
		return "attempt 12 of 12: dial tcp 10.0.0.9:5672: connection refused" + longTail
	})
	retryOrders.Set("csrf", c.csrf)
	if code, body := postForm(t, srv.URL+"/dead/groups/retry", "", retryOrders); code != http.StatusConflict || !strings.Contains(body, "changed since") {
		t.Fatalf("group retry after the group grew: %d %q; want 409 saying it changed since the page was read", code, body)
	}
	for _, m := range append(orders, late) {
		if got, err := db.store.Get(ctx, m.ID); err != nil || got.Status != outbox.StatusDead {
			t.Fatalf("message %s after a refused group retry: %v, %v; want still dead", m.ID, got.Status, err)
		}
	}

	page = get(t, srv.URL+"/dead")
	retryOrders, discardInvoices := groupForm(t, page, ordersGroup), groupForm(t, page, invoicesGroup)
	retryOrders.Set("csrf", c.csrf)
	discardInvoices.Set("csrf", c.csrf)
	if code, body := postForm(t, srv.URL+"/dead/groups/retry", "", retryOrders); code != http.StatusSeeOther {
		t.Fatalf("group retry: %d %q; want 303", code, body)
	}
	if code, body := postForm(t, srv.URL+"/dead/groups/discard", "", discardInvoices); code != http.StatusSeeOther {
		t.Fatalf("group discard: %d %q; want 303", code, body)
	}
	for _, m := range append(orders, late) {
		if got, err := db.store.Get(ctx, m.ID); err != nil || got.Status != outbox.StatusPending {
			t.Errorf("message %s of the retried group: %v, %v; want pending", m.ID, got.Status, err)
		}
	}
	for _, m := range invoices {
		if _, err := db.store.Get(ctx, m.ID); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("message %s of the discarded group: %v; want it gone", m.ID, err)
		}
	}
	if got, err := db.store.Get(ctx, refund.ID); err != nil || got.Status != outbox.StatusDead {
		t.Errorf("message %s of neither group: %v, %v; want still dead", refund.ID, got.Status, err)
	}

	audit := lines.records(t, "outbox console: audit")
	if len(audit) != 3 {
		t.Fatalf("%d audit lines for three group changes; want 3", len(audit))
	}
	for i, want := range []struct {
		action, group, outcome   string
		shown, messages, changed float64
	}{
		{"retry-group", ordersGroup, "refused", 3, 4, 0},
		{"retry-group", ordersGroup, "done", 4, 4, 4},
		{"discard-group", invoicesGroup, "done", 2, 2, 2},
	} {
		r := audit[i]
		if r["action"] != want.action || r["group"] != want.group || r["outcome"] != want.outcome || r["shown"] != want.shown ||
			r["messages"] != want.messages || r["changed"] != want.changed {
			t.Errorf("audit line %d: %v; want action %s, group %s, outcome %s, shown %v, messages %v, changed %v",
				i, r, want.action, want.group, want.outcome, want.shown, want.messages, want.changed)
		}
	}

	// A read-only console refuses a group change, and audits the refusal.
	log, lines = captureLog(t)
	ro, err := newConsole(db.store, nil, "the.table", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ro.readOnly = true
	roSrv := httptest.NewServer(ro.handler())
	t.Cleanup(roSrv.Close)
	page = get(t, roSrv.URL+"/dead")
	if !strings.Contains(page, `id="g-`+refundsGroup+`"`) || strings.Contains(page, `method="post"`) {
		t.Fatalf("read-only dead letters page: want the refunds group and no form that changes anything:\n%s", page)
	}
	form := groupForm(t, get(t, srv.URL+"/dead"), refundsGroup)
	form.Set("csrf", ro.csrf)
	for _, action := range []string{"retry", "discard"} {
		if code, body := postForm(t, roSrv.URL+"/dead/groups/"+action, "", form); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("group %s on a read-only console: %d %q; want 403 saying read-only", action, code, body)
		}
	}
	if got, err := db.store.Get(ctx, refund.ID); err != nil || got.Status != outbox.StatusDead {
		t.Errorf("message %s after refused group changes: %v, %v; want still dead", refund.ID, got.Status, err)
	}
	if audit := lines.records(t, "outbox console: audit"); len(audit) != 2 || audit[0]["outcome"] != "refused" || audit[1]["action"] != "discard-group" {
		t.Errorf("read-only audit lines %v; want two refusals", audit)
	}
}

func TestConsoleMessagePageShowsTheHistoryOfFailedAttemptsAndTheWholeError(t *testing.T) {
	t.Parallel()
	testConsoleMessageHistory(t, postgresDB(t))
}

func TestSQLiteConsoleMessagePageShowsTheHistoryOfFailedAttemptsAndTheWholeError(t *testing.T) {
	t.Parallel()
	testConsoleMessageHistory(t, sqliteProcessDB(t))
}

// testConsoleMessageHistory dead-letters a message with a long error and a
// recorded history: its page shows each attempt with its whole error, and
// the whole last error, which the list cuts.
func testConsoleMessageHistory(t *testing.T, db processDB) {
	m := &outbox.Message{Topic: "orders", Key: "o1", Payload: []byte("{}")}
	last := "attempt 3 of 3: dial tcp 10.0.0.1:5672: connection refused" + longTail
	deadLetterAll(t, db, []*outbox.Message{m}, func(int, *outbox.Message) string { return last })
	if err := db.store.RecordAttempts(t.Context(), []outboxdriver.Attempt{
		{MessageID: m.ID, Number: 1, Outcome: outboxdriver.AttemptRetried, Class: outboxdriver.ClassRetryable, Error: "dial tcp 10.0.0.1:5672: i/o timeout (FIRST)"},
		{MessageID: m.ID, Number: 3, Outcome: outboxdriver.AttemptDead, Class: outboxdriver.ClassExhausted, Error: "dial tcp 10.0.0.1:5672: connection refused" + longTail},
	}); err != nil {
		t.Fatal(err)
	}
	c, err := newConsole(db.store, nil, "the.table", relaytest.TestLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	if list := get(t, srv.URL+"/dead"); strings.Count(list, "END OF ERROR") != 1 {
		t.Fatalf("the list: want the error whole once (in its group) and cut in the message's row:\n%s", list)
	}
	page := get(t, srv.URL+"/dead/"+m.ID.String())
	history := regexp.MustCompile(`(?s)<table id="history">.*?</table>`).FindString(page)
	rows := regexp.MustCompile(`(?s)<tr class="attempt">.*?</tr>`).FindAllString(history, -1)
	if len(rows) != 2 {
		t.Fatalf("the message page lists %d attempts; want 2:\n%s", len(rows), page)
	}
	for i, want := range [][]string{
		{">1<", "retried", "retryable", "i/o timeout (FIRST)"},
		{">3<", "dead", "exhausted", "END OF ERROR"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[i], w) {
				t.Errorf("attempt row %d lacks %q:\n%s", i, w, rows[i])
			}
		}
	}
	if !strings.Contains(page, `<td class="mono error" id="last-error">`+html.EscapeString(last)+"</td>") {
		t.Fatalf("the message page does not show the whole last error %q:\n%s", last, page)
	}
}
