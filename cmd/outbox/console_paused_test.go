package main

import (
	"io"
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

func TestConsolePausesAndResumesATopicAndListsWhatItHolds(t *testing.T) {
	t.Parallel()
	testConsolePause(t, postgresDB(t))
}

func TestSQLiteConsolePausesAndResumesATopicAndListsWhatItHolds(t *testing.T) {
	t.Parallel()
	testConsolePause(t, sqliteProcessDB(t))
}

// pausedRow is the row of a topic in the Paused page's list of kind
// ("paused" or "resumed").
func pausedRow(page, kind, topic string) string {
	return regexp.MustCompile(`(?s)<tr id="` + kind + `-` + regexp.QuoteMeta(topic) + `">.*?</tr>`).FindString(page)
}

// pausedBanner is the overview's notice of the paused topics.
var pausedBanner = regexp.MustCompile(`(?s)<div class="notice" id="banner-paused">.*?</div>`)

// postSeeOther posts form to url and returns the status and where it
// sends the browser.
func postSeeOther(t *testing.T, url string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// testConsolePause: the Paused page pauses a topic from its form (the
// topic is required, the form token checked), lists it with who, why and
// how many messages wait, and the overview names it; a topic resumed while
// a paused topic holds its messages in their key is listed as resumed with
// them; Resume publishes again what no paused topic holds; every change
// is audited, a read-only console refuses them, and a table migrated
// before pausing existed says to migrate instead of failing.
func testConsolePause(t *testing.T, db processDB) {
	ctx := t.Context()
	args := append([]string{"--database-url", db.url}, db.args...)
	// orders' c-1 is behind mail's c-1 in its key.
	msgs := []*outbox.Message{{Topic: "mail", Key: "c-1", Payload: []byte("1")}, {Topic: "orders", Key: "c-1", Payload: []byte("2")},
		{Topic: "mail", Key: "c-2", Payload: []byte("3")}, {Topic: "invoices", Payload: []byte("4")}}
	if err := db.write(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	base, log := startConsole(t, args...)

	page := get(t, base+"/paused")
	token := csrfOf.FindStringSubmatch(page)
	if !strings.Contains(page, `id="no-paused"`) || !strings.Contains(page, `id="pause-form"`) || token == nil {
		t.Fatalf("the Paused page before any pause: %q; want no topic paused and the form to pause one", page)
	}
	if page := get(t, base+"/"); pausedBanner.MatchString(page) || !strings.Contains(page, `href="/paused"`) {
		t.Errorf("the overview before any pause: want no paused notice and a Paused link, got %q", page)
	}
	if code, page := fetch(t, http.MethodPost, base+"/paused/pause", url.Values{"csrf": {token[1]}, "topic": {"  "}, "reason": {"x"}}); code != http.StatusBadRequest || !strings.Contains(page, "topic:") {
		t.Errorf("a pause without a topic: %d %q; want 400 naming the field", code, page)
	}
	if code, _ := fetch(t, http.MethodPost, base+"/paused/pause", url.Values{"csrf": {"0" + token[1]}, "topic": {"mail"}}); code != http.StatusForbidden {
		t.Errorf("a pause with a wrong form token: %d; want 403", code)
	}
	if page := get(t, base+"/paused"); !strings.Contains(page, `id="no-paused"`) {
		t.Fatalf("after the refused pauses the Paused page lists %q; want nothing paused", page)
	}

	code, where := postSeeOther(t, base+"/paused/pause", url.Values{"csrf": {token[1]}, "topic": {"mail"}, "reason": {"gateway down"}})
	if code != http.StatusSeeOther || where != "/paused?done=pause&n=2" {
		t.Fatalf("pause mail: %d to %q; want 303 back to the Paused page with its 2 messages held", code, where)
	}
	page = get(t, base+where)
	row := pausedRow(page, "paused", "mail")
	if !strings.Contains(page, "2 message(s) of the topic held: it is paused") {
		t.Errorf("the page after the pause: %q; want it to say 2 messages are held", page)
	}
	for _, want := range []string{"gateway down", "<td>console</td>", `<td class="messages">2</td>`, `action="/paused/resume"`, "ago"} {
		if !strings.Contains(row, want) {
			t.Errorf("mail's row %q lacks %s", row, want)
		}
	}
	banner := pausedBanner.FindString(get(t, base+"/"))
	for _, want := range []string{"1 topic(s) paused", "mail", "2 waiting", "gateway down", `href="/paused"`} {
		if !strings.Contains(banner, want) {
			t.Errorf("the overview's paused notice %q lacks %s", banner, want)
		}
	}

	// orders, paused and resumed while mail holds its c-1, stays held.
	if code, where := postSeeOther(t, base+"/paused/pause", url.Values{"csrf": {token[1]}, "topic": {"orders"}}); code != http.StatusSeeOther || where != "/paused?done=pause&n=1" {
		t.Fatalf("pause orders: %d to %q; want its 1 message held", code, where)
	}
	if code, where := postSeeOther(t, base+"/paused/resume", url.Values{"csrf": {token[1]}, "topic": {"orders"}}); code != http.StatusSeeOther || where != "/paused?done=resume&n=0" {
		t.Fatalf("resume orders behind paused mail: %d to %q; want none due again", code, where)
	}
	page = get(t, base+"/paused")
	if row := pausedRow(page, "resumed", "orders"); !strings.Contains(row, `<td class="messages">1</td>`) || !strings.Contains(row, "Resume") || pausedRow(page, "paused", "orders") != "" {
		t.Errorf("the Paused page after orders' resume: %q; want orders listed as resumed with 1 message held and a Resume button", page)
	}

	code, where = postSeeOther(t, base+"/paused/resume", url.Values{"csrf": {token[1]}, "topic": {"mail"}})
	if code != http.StatusSeeOther || where != "/paused?done=resume&n=3" {
		t.Fatalf("resume mail: %d to %q; want its 2 messages and orders' c-1 due again", code, where)
	}
	page = get(t, base+where)
	if !strings.Contains(page, "3 message(s) due again: the topic is resumed") || !strings.Contains(page, `id="no-paused"`) || strings.Contains(page, `id="resumed"`) {
		t.Errorf("the page after mail's resume: %q; want 3 due again and nothing paused or held", page)
	}
	if page := get(t, base+"/"); pausedBanner.MatchString(page) {
		t.Errorf("the overview after the resume still has a paused notice: %q", pausedBanner.FindString(page))
	}
	if st, err := db.stats(ctx); err != nil || st.Pending != 4 {
		t.Errorf("after the resume: %+v, %v; want the 4 messages pending", st, err)
	}
	if code, page := fetch(t, http.MethodPost, base+"/paused/resume", url.Values{"csrf": {token[1]}}); code != http.StatusBadRequest || !strings.Contains(page, "topic:") {
		t.Errorf("a resume without a topic: %d %q; want 400 naming the field", code, page)
	}

	audit := regexp.MustCompile(`outbox console: audit.*action=pause .*topic=mail.*`).FindString(log.String())
	for _, want := range []string{"user=anonymous", `reason="gateway down"`, "changed=2", "outcome=done"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the pause's audit line %q lacks %s", audit, want)
		}
	}
	audit = regexp.MustCompile(`outbox console: audit.*action=resume .*topic=mail.*`).FindString(log.String())
	for _, want := range []string{"user=anonymous", "changed=3", "outcome=done"} {
		if !strings.Contains(audit, want) {
			t.Errorf("the resume's audit line %q lacks %s", audit, want)
		}
	}
	if refused := regexp.MustCompile(`outbox console: audit.*action=pause .*outcome=refused.*`).FindAllString(log.String(), -1); len(refused) != 2 {
		t.Errorf("audit lines of the refused pauses: %q; want the one without a topic and the one with a wrong token", refused)
	}

	readOnly, _ := startConsole(t, append([]string{"--read-only"}, args...)...)
	if code, page := fetch(t, http.MethodPost, readOnly+"/paused/pause", url.Values{"csrf": {token[1]}, "topic": {"mail"}}); code != http.StatusForbidden || !strings.Contains(page, "outbox pause") {
		t.Errorf("a pause on a read-only console: %d %q; want 403 naming the command", code, page)
	}
	if page := get(t, readOnly+"/paused"); csrfOf.MatchString(page) || strings.Contains(page, `id="pause-form"`) {
		t.Errorf("a read-only console's Paused page offers a form: %q", page)
	}
	if names, err := db.store.(outboxdriver.TopicPauser).PausedTopicNames(ctx); err != nil || len(names) != 0 {
		t.Errorf("after the read-only console's refusal the paused topics are %q, %v; want none", names, err)
	}

	// Back to before the paused topics table (the per-minute rollup came
	// after it).
	with := append([]string{"migrate", "down"}, args...)
	mustCLI(t, with...)
	mustCLI(t, with...)
	if page := get(t, base+"/paused"); !strings.Contains(page, `id="paused-problem"`) || !strings.Contains(page, "outbox migrate up") || strings.Contains(page, `id="pause-form"`) {
		t.Errorf("the Paused page of a table without the paused topics table: %q; want it to say to run outbox migrate up, and no form", page)
	}
	if code, page := fetch(t, http.MethodPost, base+"/paused/pause", url.Values{"csrf": {token[1]}, "topic": {"mail"}}); code != http.StatusConflict || !strings.Contains(page, "outbox migrate up") {
		t.Errorf("a pause on a table without the paused topics table: %d %q; want 409 saying to migrate", code, page)
	}
	if page := get(t, base+"/"); pausedBanner.MatchString(page) || strings.Contains(page, "paused topics table") {
		t.Errorf("the overview of a table without the paused topics table mentions them: %q", page)
	}
}

// Pausing from a console that asks for a login records the user who
// paused, and a store that cannot pause says so instead of failing.
func TestConsolePauseNamesTheLoggedInUserAndAStoreWithoutPausingSaysSo(t *testing.T) {
	t.Parallel()
	db := postgresDB(t)
	if err := db.write(t.Context(), []*outbox.Message{{Topic: "mail", Payload: []byte("1")}}); err != nil {
		t.Fatal(err)
	}
	htpasswd := writeFile(t, "htpasswd", htpasswdLine(t, "alice", testPassword))
	base, log := startConsole(t, append([]string{"--auth", "basic:" + htpasswd, "--database-url", db.url}, db.args...)...)
	req, err := http.NewRequest(http.MethodGet, base+"/paused", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("alice", testPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = io.Copy(&body, resp.Body)
	resp.Body.Close()
	token := csrfOf.FindStringSubmatch(body.String())
	if token == nil {
		t.Fatalf("the Paused page as alice: %d %q; want a form token", resp.StatusCode, body.String())
	}
	if code, page := postForm(t, base+"/paused/pause", "alice", url.Values{"csrf": {token[1]}, "topic": {"mail"}}); code != http.StatusSeeOther {
		t.Fatalf("pause as alice: %d %q; want 303", code, page)
	}
	list, err := db.store.(outboxdriver.TopicPauser).PausedTopics(t.Context())
	if err != nil || len(list) != 1 || list[0].By != "alice" || list[0].Messages != 1 {
		t.Fatalf("paused topics after alice's pause: %+v, %v; want mail by alice with 1 message", list, err)
	}
	if audit := regexp.MustCompile(`outbox console: audit.*action=pause .*`).FindString(log.String()); !strings.Contains(audit, "user=alice") || !strings.Contains(audit, "topic=mail") {
		t.Errorf("the pause's audit line %q; want alice and the topic", audit)
	}

	// A store without TopicPauser: only its Admin methods show.
	c, err := newConsole(struct{ outboxdriver.Admin }{db.store}, nil, "outbox", relaytest.TestLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	if page := get(t, srv.URL+"/paused"); !strings.Contains(page, "This store cannot pause topics") {
		t.Errorf("the Paused page of a store that cannot pause: %q; want it to say so", page)
	}
	if code, page := fetch(t, http.MethodPost, srv.URL+"/paused/pause", url.Values{"csrf": {c.csrf}, "topic": {"mail"}}); code != http.StatusNotImplemented || !strings.Contains(page, "cannot pause") {
		t.Errorf("a pause on a store that cannot pause: %d %q; want 501 saying so", code, page)
	}
}
