package main

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
)

func TestConsoleReplaysKeptMessagesAfterCountingThemAndAConfirmation(t *testing.T) {
	t.Parallel()
	testConsoleReplay(t, postgresDB(t))
}

func TestSQLiteConsoleReplaysKeptMessagesAfterCountingThemAndAConfirmation(t *testing.T) {
	t.Parallel()
	testConsoleReplay(t, sqliteProcessDB(t))
}

// confirmForm is the fields of the Replay page's confirmation form.
var confirmForm = regexp.MustCompile(`(?s)<form method="post" action="[^"]*/replay/confirm".*?</form>`)

var hiddenField = regexp.MustCompile(`<input type="hidden" name="(\w+)" value="([^"]*)">`)

// formValues are the hidden fields of form.
func formValues(form string) url.Values {
	v := url.Values{}
	for _, m := range hiddenField.FindAllStringSubmatch(form, -1) {
		v.Set(m[1], html.UnescapeString(m[2]))
	}
	return v
}

// testConsoleReplay: the Replay page says when nothing published is kept;
// its count changes nothing and checks the choice as outbox replay does;
// its confirmation (a POST with the form token) makes pending again the
// messages counted, is sent back with how many, and is audited; a count
// over the limit is refused, and a read-only console refuses the replay.
func testConsoleReplay(t *testing.T, db processDB) {
	ctx := t.Context()
	args := append([]string{"--database-url", db.url}, db.args...)
	base, log := startConsole(t, args...)
	if page := get(t, base+"/replay"); !strings.Contains(page, `id="no-retention"`) {
		t.Errorf("the Replay page of a table that keeps nothing published: %q; want it to say so", page)
	}

	msgs := []*outbox.Message{{Topic: "orders", Payload: []byte("1")}, {Topic: "orders", Payload: []byte("2")}, {Topic: "invoices", Payload: []byte("3")}}
	publishKeepingAll(t, db, msgs)
	if page := get(t, base+"/replay"); strings.Contains(page, `id="no-retention"`) || !strings.Contains(page, "3 kept now") {
		t.Errorf("the Replay page with 3 messages kept: %q; want 3 kept and no warning", page)
	}
	if code, page := fetch(t, http.MethodGet, base+"/replay?count=1", nil); code != http.StatusBadRequest || !strings.Contains(page, "--all") {
		t.Errorf("a count with no choice: %d %q; want 400 saying to choose or give all, as outbox replay does", code, page)
	}
	if code, page := fetch(t, http.MethodGet, base+"/replay?count=1&since=yesterday", nil); code != http.StatusBadRequest || !strings.Contains(page, "yesterday") {
		t.Errorf("a count since yesterday: %d %q; want 400 naming the value", code, page)
	}
	page := get(t, base+"/replay?count=1&topic=orders&since=1h")
	form := confirmForm.FindString(page)
	if !strings.Contains(page, "<strong>2</strong> published message(s) match") || form == "" {
		t.Fatalf("the count of orders: %q; want 2 and a confirmation form", page)
	}
	if st, _ := db.stats(ctx); st.Published != 3 || st.Pending != 0 {
		t.Fatalf("after the count: %+v; want nothing changed", st)
	}
	values := formValues(form)
	if values.Get("until") == "" || values.Get("since") == "1h" {
		t.Errorf("the confirmation carries since %q, until %q; want the times the count meant", values.Get("since"), values.Get("until"))
	}

	over := url.Values{}
	for k, v := range values {
		over[k] = v
	}
	over.Set("counted", "10001")
	if code, page := fetch(t, http.MethodPost, base+"/replay/confirm", over); code != http.StatusConflict || !strings.Contains(page, "more than 10000") {
		t.Errorf("a replay of 10001: %d %q; want 409 naming the limit", code, page)
	}
	wrong := url.Values{}
	for k, v := range values {
		wrong[k] = v
	}
	wrong.Set("csrf", "0"+values.Get("csrf"))
	if code, _ := fetch(t, http.MethodPost, base+"/replay/confirm", wrong); code != http.StatusForbidden {
		t.Errorf("a replay with a wrong form token: %d; want 403", code)
	}
	if st, _ := db.stats(ctx); st.Published != 3 {
		t.Fatalf("after the refusals: %+v; want nothing replayed", st)
	}

	readOnly, _ := startConsole(t, append([]string{"--read-only"}, args...)...)
	if code, _ := fetch(t, http.MethodPost, readOnly+"/replay/confirm", values); code != http.StatusForbidden {
		t.Errorf("a replay on a read-only console: %d; want 403", code)
	}

	req, err := http.NewRequest(http.MethodPost, base+"/replay/confirm", strings.NewReader(values.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	where := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || where != "/replay?done=replay&n=2" {
		t.Fatalf("replay: %d to %q; want 303 back to the Replay page with 2 replayed", resp.StatusCode, where)
	}
	if page := get(t, base+where); !strings.Contains(page, "2 message(s) pending again, to be published again with their ids") {
		t.Errorf("the page after the replay: %q; want it to say 2 are pending again", page)
	}
	for _, m := range msgs[:2] {
		if got, err := db.store.Get(ctx, m.ID); err != nil || got.Status != outbox.StatusPending {
			t.Fatalf("replayed %s: %v, %v; want pending with its id", m.ID, got.Status, err)
		}
	}
	if got, err := db.store.Get(ctx, msgs[2].ID); err != nil || got.Status != outbox.StatusPublished {
		t.Fatalf("the invoice %s, not chosen: %v, %v; want still published", msgs[2].ID, got.Status, err)
	}
	// Every kept message: the count fixes its window, which the
	// confirmation carries and the replay keeps to.
	page = get(t, base+"/replay?count=1&all=1")
	form = confirmForm.FindString(page)
	if !strings.Contains(page, "<strong>1</strong> published message(s) match") || form == "" {
		t.Fatalf("the count of every kept message: %q; want the 1 invoice and a confirmation form", page)
	}
	if code, page := fetch(t, http.MethodPost, base+"/replay/confirm", formValues(form)); code != http.StatusSeeOther {
		t.Fatalf("the replay of every kept message: %d %q; want 303 back to the Replay page", code, page)
	}
	if got, err := db.store.Get(ctx, msgs[2].ID); err != nil || got.Status != outbox.StatusPending {
		t.Fatalf("the invoice %s after replaying every kept message: %v, %v; want pending", msgs[2].ID, got.Status, err)
	}
	audit := regexp.MustCompile(`outbox console: audit.*action=replay .*outcome=done.*`).FindString(log.String())
	for _, want := range []string{"user=anonymous", "topic=orders", "counted=2", "changed=2"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the replay's audit line %q lacks %s", audit, want)
		}
	}
}
