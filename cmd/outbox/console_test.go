package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// deadLetter writes a message and dead-letters it as a relay would.
func deadLetter(t *testing.T, store *outboxpg.Store, payload, reason string) uuid.UUID {
	t.Helper()
	id, token := writeAndClaim(t, store, payload)
	kill(t, store, token, id, reason)
	return id
}

// writeAndClaim writes a message and claims it, as a relay would, under a
// lease of a minute; there must be no other pending message.
func writeAndClaim(t *testing.T, store *outboxpg.Store, payload string) (id, token uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Topic: "orders.placed", Key: "o-7", Payload: []byte(payload), Headers: map[string]string{"content-type": "application/json"}}
	if err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	token = uuid.New()
	claimed, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token})
	if err != nil || len(claimed) != 1 || claimed[0].ID != m.ID {
		t.Fatalf("claim message %s: claimed %d message(s), %v; want it alone", m.ID, len(claimed), err)
	}
	return m.ID, token
}

// kill dead-letters the claimed message id, as a relay would.
func kill(t *testing.T, store *outboxpg.Store, token, id uuid.UUID, reason string) {
	t.Helper()
	if _, err := store.SettleAndClaim(context.Background(), outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: id, Error: reason}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
}

// "Discard all matching" discards the dead messages the page counted for
// the filter, and only those: not one that did not match, nor one that
// matches but died after the page was read (its id is older than the
// newest shown: ids order by creation, not by death).
func TestConsoleDiscardsTheMatchesThePageShowedNotThoseThatDiedSince(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	mustCLI(t, "migrate", "up", "--database-url", pgtest.URL(t), "--schema", schema)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	// Written first, in flight while the page is read, dead-lettered after.
	late, lateToken := writeAndClaim(t, store, "{}")
	timeouts := []uuid.UUID{deadLetter(t, store, "{}", "timeout after 5s"), deadLetter(t, store, "{}", "Timeout after 5s")}
	other := deadLetter(t, store, "{}", "refused: 422")
	c, err := newConsole(store, nil, store.Name(), relaytest.TestLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)

	page := get(t, srv.URL+"/dead?q=timeout")
	seen := regexp.MustCompile(`name="seen" value="([^"]*)"`).FindStringSubmatch(page)
	if !strings.Contains(page, "2 matching dead message(s)") || seen == nil {
		t.Fatalf("dead letters page for q=timeout: want 2 matches and a seen field, got %q", page)
	}
	kill(t, store, lateToken, late, "timeout after 5s")

	form := url.Values{"csrf": {c.csrf}, "q": {"timeout"}, "seen": {seen[1]}}
	resp, err := http.PostForm(srv.URL+"/dead/discard-matching", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "2 of the 2 message(s) shown discarded") {
		t.Fatalf("discard matching: %d, page %q; want the list again saying 2 of the 2 shown discarded", resp.StatusCode, body)
	}
	for _, id := range timeouts {
		if _, err := store.Get(context.Background(), id); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("message %s was shown as a match but is still there: %v", id, err)
		}
	}
	for _, id := range []uuid.UUID{other, late} {
		if m, err := store.Get(context.Background(), id); err != nil || m.Status != outbox.StatusDead {
			t.Errorf("message %s was not shown as a match but is %v, %v; want still dead", id, m.Status, err)
		}
	}

	resp, err = http.PostForm(srv.URL+"/dead/discard-matching", url.Values{"csrf": {c.csrf}, "q": {"timeout"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("discard matching without the list of what the page showed: %d, want 400", resp.StatusCode)
	}
	if m, err := store.Get(context.Background(), late); err != nil || m.Status != outbox.StatusDead {
		t.Errorf("message %s after a form without the seen list is %v, %v; want still dead", late, m.Status, err)
	}
}

// get returns the body of a 200 answer to GET url.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	return string(body)
}

// fakeAdmin is a table that counts one dead message but lists none, for the
// console's tests that need no database: it counts the discards asked of it.
type fakeAdmin struct {
	outboxdriver.Admin // the methods these tests do not call
	discards           atomic.Int32
}

func (*fakeAdmin) Stats(context.Context) (outboxdriver.Stats, error) {
	return outboxdriver.Stats{Dead: 1}, nil
}

func (*fakeAdmin) ListDead(context.Context, uuid.UUID, int) ([]outbox.Message, error) {
	return nil, nil
}

func (a *fakeAdmin) DiscardDead(_ context.Context, ids ...uuid.UUID) (int, error) {
	a.discards.Add(1)
	return len(ids), nil
}

// A page of a site whose name resolves to 127.0.0.1 (DNS rebinding) sends
// its own host name: the console answers neither its GETs nor its POSTs,
// even with the form token. A POST whose Origin or Sec-Fetch-Site names
// another site is refused too. IP addresses, localhost and the names the
// user allowed are served.
func TestConsoleAnswersOnlyItsOwnHostNamesAndPostsFromItsOwnPages(t *testing.T) {
	t.Parallel()
	admin := &fakeAdmin{}
	c, err := newConsole(admin, nil, "public.outbox", relaytest.TestLogger(t), []string{"Console.Internal."})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	discard := srv.URL + "/dead/" + uuid.NewString() + "/discard"
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, url, host string
		header            map[string]string
		want              int
	}{
		{"GET", srv.URL + "/", "evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"GET", srv.URL + "/dead", "evil.example", nil, http.StatusMisdirectedRequest},
		{"POST", discard, "evil.example:" + port, nil, http.StatusMisdirectedRequest},
		{"POST", discard, "evil.example:" + port, map[string]string{"Origin": "http://evil.example:" + port}, http.StatusMisdirectedRequest},
		{"POST", discard, "127.0.0.1:" + port, map[string]string{"Origin": "http://evil.example:" + port}, http.StatusForbidden},
		{"POST", discard, "127.0.0.1:" + port, map[string]string{"Origin": "null"}, http.StatusForbidden},
		{"POST", discard, "127.0.0.1:" + port, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"GET", srv.URL + "/", "127.0.0.1:" + port, nil, http.StatusOK},
		{"GET", srv.URL + "/", "[::1]:" + port, nil, http.StatusOK},
		{"GET", srv.URL + "/", "LocalHost:" + port, nil, http.StatusOK},
		{"GET", srv.URL + "/", "console.internal", nil, http.StatusOK},
		{"POST", discard, "localhost:" + port, map[string]string{"Origin": "http://localhost:" + port, "Sec-Fetch-Site": "same-origin"}, http.StatusSeeOther},
	} {
		req, err := http.NewRequest(tc.method, tc.url, strings.NewReader(url.Values{"csrf": {c.csrf}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		before := admin.discards.Load()
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s, Host %s, %v: %d %q; want %d", tc.method, tc.url, tc.host, tc.header, resp.StatusCode, body, tc.want)
		}
		if acted := admin.discards.Load() != before; acted != (tc.want == http.StatusSeeOther) {
			t.Errorf("%s %s, Host %s, %v: discard called %v", tc.method, tc.url, tc.host, tc.header, acted)
		}
		if tc.want == http.StatusMisdirectedRequest && !strings.Contains(string(body), "DNS rebinding") {
			t.Errorf("refusal of Host %s says %q; want it to name the DNS rebinding protection and the fix", tc.host, body)
		}
	}
}

// The result a page announces after a change comes from the console's own
// sentences: the query string picks one and gives its numbers, and any other
// text in it shows nothing.
func TestConsoleAnnouncesOnlyItsOwnResults(t *testing.T) {
	t.Parallel()
	c, err := newConsole(&fakeAdmin{}, nil, "public.outbox", relaytest.TestLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	for query, want := range map[string]string{
		"done=discard&n=3":                   "3 message(s) discarded",
		"done=retry&n=2&of=2":                "2 of the 2 message(s) shown pending again",
		"done=discard&n=1&of=3":              "1 of the 3 message(s) shown discarded; the others are no longer dead letters matching the filter",
		"done=Call+555-0100+to+restore+data": "",
		"done=3+message(s)+discarded":        "",
		"done=discard&n=lots":                "",
		"done=discard&n=-1":                  "",
		"done=discard":                       "",
		"n=3":                                "",
	} {
		page := get(t, srv.URL+"/?"+query)
		flash := regexp.MustCompile(`id="flash">([^<]*)<`).FindStringSubmatch(page)
		switch {
		case want == "" && flash != nil:
			t.Errorf("?%s shows %q; want no announcement", query, flash[1])
		case want != "" && (flash == nil || flash[1] != want):
			t.Errorf("?%s shows %v; want %q", query, flash, want)
		}
		if strings.Contains(page, "555-0100") || strings.Contains(page, "lots") {
			t.Errorf("?%s: the page repeats text of the query string", query)
		}
	}
}

// postForm posts form to url as the user (basic auth; "" for none) and
// returns the status and body, without following a redirect.
func postForm(t *testing.T, url, user string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, testPassword)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A read-only console refuses every change to dead letters with 403 and a
// sentence saying why, changes nothing in the table, writes an audit line
// for each refusal, and its pages say read-only and offer no change.
func TestConsoleReadOnlyRefusesEveryDeadLetterChangeAndChangesNothing(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	mustCLI(t, "migrate", "up", "--database-url", pgtest.URL(t), "--schema", schema)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	a, b := deadLetter(t, store, "{}", "timeout after 5s"), deadLetter(t, store, "{}", "timeout after 5s")
	log, lines := captureLog(t)
	c, err := newConsole(store, nil, store.Name(), log, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.readOnly = true
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)

	for _, page := range []string{"/", "/dead", "/dead?q=timeout", "/dead/" + a.String()} {
		body := get(t, srv.URL+page)
		if !strings.Contains(body, "read-only") || strings.Contains(body, `method="post"`) {
			t.Errorf("page %s of a read-only console: want it to say read-only and hold no form that changes anything:\n%s", page, body)
		}
	}
	seen := seenField([]outbox.Message{{ID: a}, {ID: b}})
	for _, post := range []struct {
		path string
		form url.Values
	}{
		{"/dead/" + a.String() + "/retry", url.Values{}},
		{"/dead/" + a.String() + "/discard", url.Values{}},
		{"/dead/retry-matching", url.Values{"q": {"timeout"}, "seen": {seen}}},
		{"/dead/discard-matching", url.Values{"q": {"timeout"}, "seen": {seen}}},
	} {
		post.form.Set("csrf", c.csrf)
		code, body := postForm(t, srv.URL+post.path, "", post.form)
		if code != http.StatusForbidden || !strings.Contains(body, "the console runs read-only") {
			t.Errorf("POST %s to a read-only console: %d %q; want 403 saying the console runs read-only", post.path, code, body)
		}
	}
	for _, id := range []uuid.UUID{a, b} {
		if m, err := store.Get(context.Background(), id); err != nil || m.Status != outbox.StatusDead {
			t.Errorf("message %s after refused changes: %+v, %v; want it dead as before", id, m, err)
		}
	}
	audit := lines.records(t, "outbox console: audit")
	if len(audit) != 4 {
		t.Fatalf("%d audit lines for 4 refused changes; want 4", len(audit))
	}
	for _, r := range audit {
		if r["outcome"] != "refused" || r["user"] != "anonymous" || !strings.Contains(r["error"].(string), "read-only") {
			t.Errorf("audit line %v; want outcome refused, user anonymous and the read-only reason", r)
		}
	}
}

// Every change is one audit line at INFO: who (the basic-auth user and the
// remote address), what (action, table, the ids, or the filter and how
// many) and the outcome.
func TestConsoleAuditsEachDeadLetterChangeWithWhoWhatAndOutcome(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	mustCLI(t, "migrate", "up", "--database-url", pgtest.URL(t), "--schema", schema)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	retried := deadLetter(t, store, "{}", "refused: 422")
	timeouts := []uuid.UUID{deadLetter(t, store, "{}", "timeout after 5s"), deadLetter(t, store, "{}", "timeout after 5s")}
	auth, err := parseConsoleAuth([]string{"basic:" + writeFile(t, "htpasswd", htpasswdLine(t, "alice", testPassword))})
	if err != nil {
		t.Fatal(err)
	}
	log, lines := captureLog(t)
	c, err := newConsole(store, nil, store.Name(), log, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.auth = auth
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)

	if code, body := postForm(t, srv.URL+"/dead/"+retried.String()+"/retry", "alice", url.Values{"csrf": {c.csrf}}); code != http.StatusSeeOther {
		t.Fatalf("retry %s: %d %q; want 303", retried, code, body)
	}
	seen := seenField([]outbox.Message{{ID: timeouts[0]}, {ID: timeouts[1]}})
	if code, body := postForm(t, srv.URL+"/dead/discard-matching", "alice", url.Values{"csrf": {c.csrf}, "q": {"timeout"}, "seen": {seen}}); code != http.StatusSeeOther {
		t.Fatalf("discard matching: %d %q; want 303", code, body)
	}
	if m, err := store.Get(t.Context(), retried); err != nil || m.Status != outbox.StatusPending {
		t.Fatalf("message %s after Retry: %+v, %v; want pending", retried, m, err)
	}

	audit := lines.records(t, "outbox console: audit")
	if len(audit) != 2 {
		t.Fatalf("%d audit lines for two changes; want 2", len(audit))
	}
	for i, want := range []map[string]any{
		{"action": "retry", "ids": []any{retried.String()}, "changed": 1.0},
		{"action": "discard-matching", "q": "timeout", "topic": "", "messages": 2.0, "changed": 2.0},
	} {
		r := audit[i]
		if r["level"] != "INFO" || r["audit"] != true || r["user"] != "alice" || !strings.HasPrefix(r["remote"].(string), "127.0.0.1:") ||
			r["table"] != store.Name() || r["outcome"] != "done" {
			t.Errorf("audit line %d: %v; want INFO, audit=true, user alice, the remote address, table %s, outcome done", i, r, store.Name())
		}
		for k, v := range want {
			if got, _ := json.Marshal(r[k]); string(got) != string(must(json.Marshal(v))) {
				t.Errorf("audit line %d: %s = %s; want %s", i, k, got, must(json.Marshal(v)))
			}
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
