package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// envScreenshots, set to a directory, makes the browser test save its pages
// there as PNG files (docs/console: OUTBOX_SCREENSHOTS=$PWD/docs/console).
const envScreenshots = "OUTBOX_SCREENSHOTS"

// The console in a real browser (headless Chromium): the overview counts a
// dead message, the dead letters page lists it, its page shows its JSON
// payload, and Retry makes it pending again, after which a relay publishes
// it. A POST without the page's token is refused.
func TestConsoleInABrowserRetriesADeadMessageAndRefusesPostsWithoutToken(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/test installs it: apt-get install chromium): %v", err)
	}
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	db := []string{"--database-url", pgtest.URL(t), "--schema", schema}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	dead := deadLetter(t, store, `{"order_id":"o-7","total_cents":1250}`, "endpoint answered 422: total must be positive")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"console", "--addr", addr}, db...), &out, &errOut) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("console exited %d: %s", code, errOut.String())
		}
	})
	base := "http://" + addr
	deadline := time.Now().Add(20 * time.Second)
	for {
		if resp, err := http.Get(base + "/"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console did not answer in 20s: %s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A form posted from elsewhere carries no token.
	resp, err := http.PostForm(base+"/dead/"+dead.String()+"/discard", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST without the form token: %d, want 403", resp.StatusCode)
	}
	if m, err := store.Get(context.Background(), dead); err != nil || m.Status != outbox.StatusDead {
		t.Fatalf("after a refused POST the message is %v, %v; want it still dead", m.Status, err)
	}

	browser := browserContext(t, chromium)
	shots := map[string][]byte{}
	step := func(what string, action chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(browser, action); err != nil {
			t.Fatalf("browser, %s: %v; console log:\n%s", what, err, errOut.String())
		}
	}
	read := func(what string, sel chromedp.CSS) string {
		t.Helper()
		text, err := chromedp.Run(browser, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("browser, read %s: %v; console log:\n%s", what, err, errOut.String())
		}
		return text
	}
	shoot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("browser, screenshot %s: %v", name, err)
		}
		shots[name] = png
	}
	row := chromedp.CSS("#m-" + dead.String())
	step("open the overview", chromedp.Navigate(base+"/"))
	deadCount := read("the dead count", "#dead")
	shoot("overview")
	step("filter the dead letters by topic", chromedp.Navigate(base+"/dead?topic=orders.placed"))
	listed := read("the message's row", row)
	shoot("dead-letters")
	step("open the message", chromedp.Navigate(base+"/dead/"+dead.String()))
	payload := read("the payload", "#payload")
	shoot("message")
	step("open the dead letters", chromedp.Navigate(base+"/dead"))
	step("click Retry", chromedp.Click(chromedp.CSS("#m-"+dead.String()+" button.retry")))
	step("wait for the result", chromedp.WaitVisible(chromedp.CSS("#flash")))
	flash := read("the result", "#flash")
	step("open the overview again", chromedp.Navigate(base+"/"))
	pending := read("the pending count", "#pending")
	if deadCount != "1" || !strings.Contains(listed, "422: total must be positive") || !strings.Contains(payload, "\"total_cents\": 1250") {
		t.Fatalf("pages showed dead %q, row %q, payload %q; want 1 dead, the error in the list and the indented JSON payload", deadCount, listed, payload)
	}
	if flash != "1 message(s) pending again" || pending != "1" {
		t.Fatalf("after Retry: flash %q, pending %q; want the message pending again", flash, pending)
	}
	rec := relaytest.NewRecorder()
	relaytest.StartRelay(t, store, rec, outbox.Config{PollInterval: 20 * time.Millisecond})
	rec.WaitFor(t, 20*time.Second, "the retried message published", func() bool { return rec.Count(dead) == 1 })

	if dir := os.Getenv(envScreenshots); dir != "" {
		for name, png := range shots {
			if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// deadLetter writes a message and dead-letters it as a relay would.
func deadLetter(t *testing.T, store *outboxpg.Store, payload, reason string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := &outbox.Message{Topic: "orders.placed", Key: "o-7", Payload: []byte(payload), Headers: map[string]string{"content-type": "application/json"}}
	if err := w.Transact(ctx, func(tx pgx.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: m.ID, Error: reason}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// browserContext starts headless Chromium for the test.
func browserContext(t *testing.T, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1200, 800),
		chromedp.UserDataDir(t.TempDir()),
	)
	// No timeout on the browser's own context: it would stop the browser;
	// each step is bounded by the test's timeout instead.
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	return ctx
}

// "Discard all matching" with the page's token discards every dead message
// the filter selects, and only those.
func TestConsoleDiscardsEveryMatchOfAFilter(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	mustCLI(t, "migrate", "up", "--database-url", pgtest.URL(t), "--schema", schema)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	timeouts := []uuid.UUID{deadLetter(t, store, "{}", "timeout after 5s"), deadLetter(t, store, "{}", "Timeout after 5s")}
	other := deadLetter(t, store, "{}", "refused: 422")
	c, err := newConsole(store, store.Name(), relaytest.TestLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	form := url.Values{"csrf": {c.csrf}, "q": {"timeout"}}
	resp, err := http.PostForm(srv.URL+"/dead/discard-matching", form)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "2 message(s) discarded") {
		t.Fatalf("discard matching: %d, page %q; want the list again saying 2 discarded", resp.StatusCode, body)
	}
	for _, id := range timeouts {
		if _, err := store.Get(context.Background(), id); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("message %s matched the filter but is still there: %v", id, err)
		}
	}
	if m, err := store.Get(context.Background(), other); err != nil || m.Status != outbox.StatusDead {
		t.Errorf("message %s did not match the filter but is %v, %v; want still dead", other, m.Status, err)
	}
}
