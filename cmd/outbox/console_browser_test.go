package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"os"
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
// dead message, warns of it and lists the relays, the dead letters page
// groups it with its whole error and lists it, its page shows its JSON
// payload and its history of failed attempts, a parked message has its
// page, and Retry makes the dead message pending again, after which a
// relay publishes it. No page logs an error to the browser's console. A
// POST without the page's token is refused.
func TestConsoleInABrowserRetriesADeadMessageAndRefusesPostsWithoutToken(t *testing.T) {
	t.Parallel()
	pool, schema := pgtest.Pool(t), pgtest.Schema(t)
	db := []string{"--database-url", pgtest.URL(t), "--schema", schema}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	dead := deadLetter(t, store, `{"order_id":"o-7","total_cents":1250}`, "endpoint answered 422: total must be positive")
	if err := store.RecordAttempts(t.Context(), []outboxdriver.Attempt{
		{MessageID: dead, Number: 1, Outcome: outboxdriver.AttemptRetried, Class: outboxdriver.ClassRetryable, Error: "endpoint answered 503: upstream unavailable"},
		{MessageID: dead, Number: 2, Outcome: outboxdriver.AttemptDead, Class: outboxdriver.ClassPermanent, Error: "endpoint answered 422: total must be positive"},
	}); err != nil {
		t.Fatal(err)
	}
	// Another way to fail, for a second group.
	deadLetter(t, store, `{"order_id":"o-8"}`, "attempt 12 of 12: dial tcp 10.0.3.7:443: connect: connection refused")
	host, _ := os.Hostname()
	for _, beat := range []outboxdriver.RelayBeat{
		{ID: uuid.New(), Host: host, PID: 4242, Version: "v1.4.0", Config: "{}", Interval: time.Hour, SinceClaim: time.Second, SincePublish: -1, Forget: time.Hour},
		// A relay that stopped beating: gone after three of its beats.
		{ID: uuid.New(), Host: "worker-2", PID: 77, Version: "v1.3.2", Config: "{}", Interval: time.Millisecond, SinceClaim: -1, SincePublish: -1, Forget: time.Hour},
	} {
		if err := store.BeatRelay(t.Context(), beat); err != nil {
			t.Fatal(err)
		}
	}
	fillMinutes(t, pool, schema)
	// A consumer's inbox beside the table: two applied messages, one
	// delivered twice, and a parked one.
	mustCLI(t, append([]string{"inbox", "migrate"}, db...)...)
	inboxTable, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(inboxTable, "billing")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())} {
		for range 2 {
			if _, err := inbox.Handle(t.Context(), id, func(context.Context, pgx.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	poison := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "invoices.due", Key: "o-7", Payload: []byte(`{"order_id":"o-7"}`)}
	if err := inboxTable.Park(t.Context(), "billing", poison, 5, "tax service answered 500"); err != nil {
		t.Fatal(err)
	}

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

	b := newBrowserSession(t, errOut.String)
	row := chromedp.CSS("#m-" + dead.String())
	b.step("open the overview", chromedp.Navigate(base+"/"))
	deadCount := b.read("the dead count", "#dead")
	deadBanner := b.read("the dead banner", "#banner-dead")
	relays := b.read("the relays", "#relays")
	charts := b.read("the charts", "#charts")
	b.shoot("overview")
	b.shoot("charts", chromedp.CSS("#charts"))
	b.step("open the dead letters", chromedp.Navigate(base+"/dead"))
	groups := b.read("the groups", "#groups")
	b.shoot("dead-letters")
	b.step("filter the dead letters by topic", chromedp.Navigate(base+"/dead?topic=orders.placed"))
	listed := b.read("the message's row", row)
	b.step("open the message", chromedp.Navigate(base+"/dead/"+dead.String()))
	payload := b.read("the payload", "#payload")
	history := b.read("the history", "#history")
	b.shoot("message")
	b.step("open the inbox", chromedp.Navigate(base+"/inbox"))
	consumer := b.read("the consumer's row", "#c-billing")
	b.shoot("inbox")
	b.step("open the parked message", chromedp.Navigate(base+"/inbox/parked/"+poison.ID.String()+"?consumer=billing"))
	parkedError := b.read("the parked message's error", "#parked-error")
	b.shoot("parked")
	if !strings.Contains(deadBanner, "2 dead message") || !strings.Contains(relays, "GONE") || !strings.Contains(relays, "v1.4.0") {
		t.Fatalf("overview: banner %q, relays %q; want the dead message warned of and a live and a gone relay", deadBanner, relays)
	}
	if !strings.Contains(charts, "published in the last hour") || !strings.Contains(charts, "Oldest pending age") {
		t.Fatalf("overview: charts %q; want the four charts of the last hour", charts)
	}
	if !strings.Contains(groups, "endpoint answered 422: total must be positive") || !strings.Contains(history, "upstream unavailable") || parkedError != "tax service answered 500" {
		t.Fatalf("groups %q, history %q, parked error %q; want the group's error, both attempts and the parked error", groups, history, parkedError)
	}
	if !strings.Contains(consumer, "billing") || !strings.HasSuffix(strings.TrimSpace(consumer), "1") {
		t.Fatalf("inbox row %q; want consumer billing with its parked message", consumer)
	}
	b.step("open the dead letters", chromedp.Navigate(base+"/dead"))
	b.step("click Retry", chromedp.Click(chromedp.CSS("#m-"+dead.String()+" button.retry")))
	b.step("wait for the result", chromedp.WaitVisible(chromedp.CSS("#flash")))
	flash := b.read("the result", "#flash")
	b.step("open the overview again", chromedp.Navigate(base+"/"))
	pending := b.read("the pending count", "#pending")
	if deadCount != "2" || !strings.Contains(listed, "422: total must be positive") || !strings.Contains(payload, "\"total_cents\": 1250") {
		t.Fatalf("pages showed dead %q, row %q, payload %q; want 2 dead, the error in the list and the indented JSON payload", deadCount, listed, payload)
	}
	if flash != "1 message(s) pending again" || pending != "1" {
		t.Fatalf("after Retry: flash %q, pending %q; want the message pending again", flash, pending)
	}
	b.finish()
	rec := relaytest.NewRecorder()
	relaytest.StartRelay(t, store, rec, outbox.Config{PollInterval: 20 * time.Millisecond})
	rec.WaitFor(t, 20*time.Second, "the retried message published", func() bool { return rec.Count(dead) == 1 })

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
