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
	"github.com/go-outbox/outbox/outboxdriver"
)

// The Paused page in a real browser: reached from the header, its form
// pauses a topic with a reason, the list shows it with the other paused
// topic and the topic resumed with a message still held in its key, the
// overview names the paused topics and links back, and Resume publishes
// the topic's messages again. No page logs an error to the browser's
// console.
func TestConsoleInABrowserPausesATopicFromItsFormAndResumesIt(t *testing.T) {
	t.Parallel()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (scripts/test installs it: apt-get install chromium): %v", err)
	}
	db := postgresDB(t)
	ctx := t.Context()
	// orders' c-1 waits behind mail's c-1 in its key.
	msgs := []*outbox.Message{{Topic: "mail.send", Key: "c-1", Payload: []byte(`{"to":"a@example.com"}`)}, {Topic: "orders.placed", Key: "c-1", Payload: []byte(`{"order":"o-1"}`)},
		{Topic: "mail.send", Key: "c-2", Payload: []byte(`{"to":"b@example.com"}`)}, {Topic: "invoices.issued", Key: "c-3", Payload: []byte(`{"invoice":"i-1"}`)}}
	if err := db.write(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	pauser := db.store.(outboxdriver.TopicPauser)
	if _, err := pauser.PauseTopic(ctx, "invoices.issued", "alice@ops-1", "billing migration, until 14:00"); err != nil {
		t.Fatal(err)
	}
	base, log := startConsole(t, append([]string{"--database-url", db.url}, db.args...)...)

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
	var shot []byte
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

	step("open the overview", chromedp.Navigate(base+"/"))
	if banner := read("the paused notice", "#banner-paused"); !strings.Contains(banner, "1 topic(s) paused") || !strings.Contains(banner, "invoices.issued") {
		t.Fatalf("the overview's notice reads %q; want invoices.issued paused", banner)
	}
	step("open the Paused page", chromedp.Click(chromedp.CSS(`header a[href$="/paused"]`)))
	step("type the topic", chromedp.SendKeys(chromedp.CSS("#topic"), "mail.send"))
	step("type the reason", chromedp.SendKeys(chromedp.CSS("#reason"), "SMTP relay rejects us, INC-4211"))
	step("pause", chromedp.Click(chromedp.CSS("#pause")))
	if flash := read("the result", "#flash"); flash != "2 message(s) of the topic held: it is paused" {
		t.Fatalf("after the pause the page says %q; want 2 held", flash)
	}
	if row := read("mail's row", `tr[id="paused-mail.send"]`); !strings.Contains(row, "SMTP relay rejects us, INC-4211") || !strings.Contains(row, "console") {
		t.Fatalf("mail's row reads %q; want the reason and who paused it", row)
	}
	// orders, paused and resumed, stays held behind mail's c-1.
	if _, err := pauser.PauseTopic(ctx, "orders.placed", "bob@ops-2", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pauser.ResumeTopic(ctx, "orders.placed"); err != nil {
		t.Fatal(err)
	}
	step("reload", chromedp.Navigate(base+"/paused"))
	if row := read("orders' row", `tr[id="resumed-orders.placed"]`); !strings.Contains(row, "1") {
		t.Fatalf("orders' row reads %q; want it resumed with 1 message held", row)
	}
	func() {
		png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("browser, screenshot: %v", err)
		}
		shot = png
	}()

	step("open the overview", chromedp.Click(chromedp.CSS(`header a[href$="/"]`)))
	if banner := read("the paused notice", "#banner-paused"); !strings.Contains(banner, "2 topic(s) paused") || !strings.Contains(banner, "mail.send") {
		t.Fatalf("the overview's notice reads %q; want mail.send among 2 paused", banner)
	}
	step("follow the notice", chromedp.Click(chromedp.CSS("#banner-paused a")))
	step("resume mail", chromedp.Click(chromedp.CSS(`tr[id="paused-mail.send"] button`)))
	if flash := read("the result", "#flash"); flash != "3 message(s) due again: the topic is resumed" {
		t.Fatalf("after the resume the page says %q; want mail's 2 and orders' 1 due again", flash)
	}
	list, err := pauser.PausedTopics(ctx)
	if err != nil || len(list) != 1 || list[0].Topic != "invoices.issued" {
		t.Fatalf("paused topics after the resume: %+v, %v; want invoices.issued alone", list, err)
	}

	stopConsole()
	<-consoleDone
	if len(consoleLogs) > 0 {
		t.Fatalf("the browser's console logged, for pages with no script:\n%s", strings.Join(consoleLogs, "\n"))
	}
	if dir := os.Getenv(envScreenshots); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "paused.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
