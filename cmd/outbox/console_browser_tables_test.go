package main

import (
	"strings"
	"testing"

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

	b := newBrowserSession(t, log.String)
	row := func(name string) chromedp.CSS { return chromedp.CSS(`tr[id="t-` + name + `"]`) }

	b.step("open the index", chromedp.Navigate(base+"/"))
	outboxRow := b.read("the outbox table's row", row(tt.outboxName))
	billingRow := b.read("the billing table's row", row(tt.billingName))
	b.shoot("tables")
	if !strings.Contains(outboxRow, "1 dead message") || !strings.Contains(billingRow, "none") {
		t.Fatalf("index rows %q and %q; want the outbox table's dead message warned of, and billing with no warning", outboxRow, billingRow)
	}
	b.step("open billing", chromedp.Click(chromedp.CSS(`tr[id="t-`+tt.billingName+`"] a`)))
	b.step("open its Replay page", chromedp.Click(chromedp.CSS(`header a[href$="/replay"]`)))
	b.step("type the topic", chromedp.SendKeys(chromedp.CSS("#topic"), "invoices.issued"))
	b.step("count", chromedp.Click(chromedp.CSS("#count")))
	counted := b.read("the count", "#counted")
	b.shoot("replay-count")
	if !strings.Contains(counted, "2 published message(s) match") {
		t.Fatalf("the count reads %q; want the 2 issued invoices", counted)
	}
	b.step("confirm", chromedp.Click(chromedp.CSS("#confirm")))
	flash := b.read("the result", "#flash")
	b.shoot("replay")
	if flash != "2 message(s) pending again, to be published again with their ids" {
		t.Fatalf("after the confirmation the page says %q; want 2 pending again", flash)
	}
	for _, m := range kept[:2] {
		if got, err := tt.billing.store.Get(t.Context(), m.ID); err != nil || got.Status != outbox.StatusPending {
			t.Fatalf("replayed %s: %v, %v; want pending", m.ID, got.Status, err)
		}
	}
	b.finish()
}
