package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/go-outbox/outbox"
)

// The console of every outbox table of a schema, in a real browser: the
// index lists both tables with their figures and warnings and links to
// each; a table's Replay page counts the kept messages of a topic, and its
// confirmation makes them pending again. No page logs an error to the
// browser's console.
func TestConsoleInABrowserListsTheTablesAndReplaysAfterAConfirmation(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/test installs it: apt-get install chromium): %v", err)
	}
	tt := postgresTwoTables(t)
	deadLetterAll(t, tt.outbox, []*outbox.Message{{Topic: "orders.placed", Payload: []byte("{}")}}, func(int, *outbox.Message) string {
		return "endpoint answered 422: total must be positive"
	})
	if err := tt.outbox.write(t.Context(), []*outbox.Message{{Topic: "orders.placed", Payload: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	kept := []*outbox.Message{{Topic: "invoices.issued", Key: "c-1", Payload: []byte(`{"invoice":"i-1"}`)}, {Topic: "invoices.issued", Key: "c-2", Payload: []byte(`{"invoice":"i-2"}`)},
		{Topic: "invoices.paid", Key: "c-1", Payload: []byte(`{"invoice":"i-1"}`)}}
	publishKeepingAll(t, tt.billing, kept)
	base, log := startConsole(t, append([]string{"--all-tables"}, tt.db...)...)

	browser := browserContext(t, chromium)
	var (
		consoleMu   sync.Mutex
		consoleLogs []string
	)
	consoleCtx, stopConsole := context.WithCancel(browser)
	messages := chromedp.Console(consoleCtx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			consoleMu.Lock()
			consoleLogs = append(consoleLogs, m.String()+" ("+m.URL+")")
			consoleMu.Unlock()
		}
	}()
	shots := map[string][]byte{}
	step := func(what string, action chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, action); err != nil {
			t.Fatalf("browser, %s: %v; console log:\n%s", what, err, log.String())
		}
	}
	read := func(what string, sel chromedp.CSS) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 20*time.Second)
		defer cancel()
		text, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("browser, read %s: %v; console log:\n%s", what, err, log.String())
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
	row := func(name string) chromedp.CSS { return chromedp.CSS(`tr[id="t-` + name + `"]`) }

	step("open the index", chromedp.Navigate(base+"/"))
	outboxRow := read("the outbox table's row", row(tt.outboxName))
	billingRow := read("the billing table's row", row(tt.billingName))
	shoot("tables")
	if !strings.Contains(outboxRow, "1 dead message") || !strings.Contains(billingRow, "none") {
		t.Fatalf("index rows %q and %q; want the outbox table's dead message warned of, and billing with no warning", outboxRow, billingRow)
	}
	step("open billing", chromedp.Click(chromedp.CSS(`tr[id="t-`+tt.billingName+`"] a`)))
	step("open its Replay page", chromedp.Click(chromedp.CSS(`header a[href$="/replay"]`)))
	step("type the topic", chromedp.SendKeys(chromedp.CSS("#topic"), "invoices.issued"))
	step("count", chromedp.Click(chromedp.CSS("#count")))
	counted := read("the count", "#counted")
	shoot("replay-count")
	if !strings.Contains(counted, "2 published message(s) match") {
		t.Fatalf("the count reads %q; want the 2 issued invoices", counted)
	}
	step("confirm", chromedp.Click(chromedp.CSS("#confirm")))
	flash := read("the result", "#flash")
	shoot("replay")
	if flash != "2 message(s) pending again, to be published again with their ids" {
		t.Fatalf("after the confirmation the page says %q; want 2 pending again", flash)
	}
	for _, m := range kept[:2] {
		if got, err := tt.billing.store.Get(t.Context(), m.ID); err != nil || got.Status != outbox.StatusPending {
			t.Fatalf("replayed %s: %v, %v; want pending", m.ID, got.Status, err)
		}
	}
	stopConsole()
	<-consoleDone
	if len(consoleLogs) > 0 {
		t.Fatalf("the browser's console logged, for pages with no script:\n%s", strings.Join(consoleLogs, "\n"))
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		for name, png := range shots {
			if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
