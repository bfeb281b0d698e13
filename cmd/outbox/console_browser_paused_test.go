package main

import (
	"strings"
	"testing"

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

	b := newBrowserSession(t, log.String)

	b.step("open the overview", chromedp.Navigate(base+"/"))
	if banner := b.read("the paused notice", "#banner-paused"); !strings.Contains(banner, "1 topic(s) paused") || !strings.Contains(banner, "invoices.issued") {
		t.Fatalf("the overview's notice reads %q; want invoices.issued paused", banner)
	}
	b.step("open the Paused page", chromedp.Click(chromedp.CSS(`header a[href$="/paused"]`)))
	b.step("type the topic", chromedp.SendKeys(chromedp.CSS("#topic"), "mail.send"))
	b.step("type the reason", chromedp.SendKeys(chromedp.CSS("#reason"), "SMTP relay rejects us, INC-4211"))
	b.step("pause", chromedp.Click(chromedp.CSS("#pause")))
	if flash := b.read("the result", "#flash"); flash != "2 message(s) of the topic held: it is paused" {
		t.Fatalf("after the pause the page says %q; want 2 held", flash)
	}
	if row := b.read("mail's row", `tr[id="paused-mail.send"]`); !strings.Contains(row, "SMTP relay rejects us, INC-4211") || !strings.Contains(row, "console") {
		t.Fatalf("mail's row reads %q; want the reason and who paused it", row)
	}
	// orders, paused and resumed, stays held behind mail's c-1.
	if _, err := pauser.PauseTopic(ctx, "orders.placed", "bob@ops-2", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pauser.ResumeTopic(ctx, "orders.placed"); err != nil {
		t.Fatal(err)
	}
	b.step("reload", chromedp.Navigate(base+"/paused"))
	if row := b.read("orders' row", `tr[id="resumed-orders.placed"]`); !strings.Contains(row, "1") {
		t.Fatalf("orders' row reads %q; want it resumed with 1 message held", row)
	}
	b.shoot("paused")

	b.step("open the overview", chromedp.Click(chromedp.CSS(`header a[href$="/"]`)))
	if banner := b.read("the paused notice", "#banner-paused"); !strings.Contains(banner, "2 topic(s) paused") || !strings.Contains(banner, "mail.send") {
		t.Fatalf("the overview's notice reads %q; want mail.send among 2 paused", banner)
	}
	b.step("follow the notice", chromedp.Click(chromedp.CSS("#banner-paused a")))
	b.step("resume mail", chromedp.Click(chromedp.CSS(`tr[id="paused-mail.send"] button`)))
	if flash := b.read("the result", "#flash"); flash != "3 message(s) due again: the topic is resumed" {
		t.Fatalf("after the resume the page says %q; want mail's 2 and orders' 1 due again", flash)
	}
	list, err := pauser.PausedTopics(ctx)
	if err != nil || len(list) != 1 || list[0].Topic != "invoices.issued" {
		t.Fatalf("paused topics after the resume: %+v, %v; want invoices.issued alone", list, err)
	}

	b.finish()
}
