package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxpg"
)

func TestConsoleShowsAParkedMessageWhereItStandsInItsKeyAndDiscardsIt(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	table, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	testConsoleParkedDetail(t, table)
}

func TestSQLiteConsoleShowsAParkedMessageWhereItStandsInItsKeyAndDiscardsIt(t *testing.T) {
	t.Parallel()
	table, _ := parkedInbox(t)
	testConsoleParkedDetail(t, table)
}

// keyedInbox is an inbox table that keeps key order for parked messages.
type keyedInbox interface {
	inboxTable
	outbox.KeyParkStore
}

// testConsoleParkedDetail parks two messages of one key, the second
// waiting behind the first, and reads and changes them through the
// console: the detail page of each (payload, headers, whole error, where
// it stands in its key), a discard refused while a consumer process has
// the message, a discard that removes it, an audit line for each, and a
// read-only console that refuses it.
func testConsoleParkedDetail(t *testing.T, table keyedInbox) {
	ctx := t.Context()
	reason := "tax service answered 500" + longTail
	first := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Key: "o-7", Payload: []byte(`{"n":1}`),
		Headers: map[string]string{"content-type": "application/json"}}
	second := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Key: "o-7", Payload: []byte{0xff, 0x00, 0x01}}
	if err := table.Park(ctx, "shipping", first, 5, reason); err != nil {
		t.Fatal(err)
	}
	if head, err := table.ParkBehind(ctx, "shipping", second); err != nil || head != first.ID {
		t.Fatalf("park %s behind %s: head %s, %v", second.ID, first.ID, head, err)
	}
	log, lines := captureLog(t)
	c, err := newConsole(&fakeAdmin{}, table, "main.outbox", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	detail := func(id uuid.UUID) string { return "/inbox/parked/" + id.String() + "?consumer=shipping" }

	list := get(t, srv.URL+"/inbox/parked?consumer=shipping")
	for _, id := range []uuid.UUID{first.ID, second.ID} {
		if !strings.Contains(list, `href="`+strings.ReplaceAll(detail(id), "&", "&amp;")+`"`) && !strings.Contains(list, `href="`+detail(id)+`"`) {
			t.Errorf("the parked list does not link to the page of %s:\n%s", id, list)
		}
	}
	page := get(t, srv.URL+detail(first.ID))
	for _, want := range []string{"&#34;n&#34;: 1", "content-type", "application/json", "END OF ERROR", `id="attempts">5<`, "invoices.due", "o-7",
		`action="/inbox/parked/discard"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the page of parked message %s lacks %q:\n%s", first.ID, want, page)
		}
	}
	page = get(t, srv.URL+detail(second.ID))
	if !strings.Contains(page, "waiting behind "+first.ID.String()) || !strings.Contains(page, "ff 00 01") {
		t.Errorf("the page of parked message %s: want it waiting behind %s and its payload in hex:\n%s", second.ID, first.ID, page)
	}
	if resp, err := http.Get(srv.URL + detail(uuid.Must(uuid.NewV7()))); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the page of a message nobody parked: %v, %v; want 404", resp.StatusCode, err)
	}

	// A consumer process takes the first for a retry: the discard is
	// refused with the command that takes it back.
	if _, err := table.RequestRetry(ctx, "shipping", first.ID); err != nil {
		t.Fatal(err)
	}
	if taken, err := table.TakeRetries(ctx, "shipping", 10); err != nil || len(taken) != 1 {
		t.Fatalf("take: %v, %v; want the first", taken, err)
	}
	form := url.Values{"csrf": {c.csrf}, "consumer": {"shipping"}, "id": {first.ID.String()}}
	take := "outbox inbox parked discard --consumer shipping --taken " + first.ID.String()
	if code, body := postForm(t, srv.URL+"/inbox/parked/discard", "", form); code != http.StatusConflict || !strings.Contains(body, take) {
		t.Fatalf("discard of a taken message: %d %q; want 409 naming %q", code, body, take)
	}
	if _, err := table.GetParked(ctx, "shipping", first.ID); err != nil {
		t.Fatalf("after a refused discard: %v; want the message still parked", err)
	}
	if _, err := table.ForgetTaken(ctx, "shipping", first.ID); err != nil {
		t.Fatal(err)
	}
	code, body := postForm(t, srv.URL+"/inbox/parked/discard", "", form)
	if code != http.StatusSeeOther {
		t.Fatalf("discard: %d %q; want 303", code, body)
	}
	if _, err := table.GetParked(ctx, "shipping", first.ID); err == nil {
		t.Fatalf("parked message %s is still there after its discard", first.ID)
	}
	if p, err := table.GetParked(ctx, "shipping", second.ID); err != nil || p.Behind != uuid.Nil {
		t.Fatalf("the message behind the discarded one: %+v, %v; want it parked, first of its key", p, err)
	}
	audit := lines.records(t, "outbox console: audit")
	if len(audit) != 2 {
		t.Fatalf("%d audit lines for two discards; want 2", len(audit))
	}
	for i, outcome := range []string{"refused", "done"} {
		r := audit[i]
		ids, _ := r["ids"].([]any)
		if r["action"] != "discard-parked" || r["table"] != table.ParkedName() || r["consumer"] != "shipping" || len(ids) != 1 || ids[0] != first.ID.String() || r["outcome"] != outcome {
			t.Errorf("audit line %d: %v; want discard-parked of %s by consumer shipping in %s, %s", i, r, first.ID, table.ParkedName(), outcome)
		}
	}

	// Read-only: the page offers no change and the discard is refused.
	log, lines = captureLog(t)
	ro, err := newConsole(&fakeAdmin{}, table, "main.outbox", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ro.readOnly = true
	roSrv := httptest.NewServer(ro.handler())
	t.Cleanup(roSrv.Close)
	if page := get(t, roSrv.URL+detail(second.ID)); !strings.Contains(page, "read-only") || strings.Contains(page, `method="post"`) {
		t.Errorf("read-only parked page: want it to say read-only and hold no form:\n%s", page)
	}
	code, body = postForm(t, roSrv.URL+"/inbox/parked/discard", "", url.Values{"csrf": {ro.csrf}, "consumer": {"shipping"}, "id": {second.ID.String()}})
	if code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Errorf("discard on a read-only console: %d %q; want 403", code, body)
	}
	if _, err := table.GetParked(ctx, "shipping", second.ID); err != nil {
		t.Errorf("after a refused discard: %v; want the message still parked", err)
	}
	if audit := lines.records(t, "outbox console: audit"); len(audit) != 1 || audit[0]["outcome"] != "refused" || audit[0]["action"] != "discard-parked" {
		t.Errorf("read-only audit lines %v; want one refused discard-parked", audit)
	}
}
