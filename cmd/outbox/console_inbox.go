package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// consoleParkedRows is how many parked messages the page of a consumer
// lists.
const consoleParkedRows = 200

// inboxRow is one consumer on the inbox page.
type inboxRow struct {
	outboxdriver.InboxConsumerStats
	Parked int64
}

// Oldest is the age of the consumer's oldest record, rounded for reading.
func (r inboxRow) Oldest() string {
	if r.Records == 0 {
		return "-"
	}
	return r.OldestAge.Round(time.Second).String()
}

// inboxPage shows each consumer of the inbox table: its records, the
// duplicates they skipped, those kept for pending outgoing messages, and
// the messages it parked.
func (c *console) inboxPage(w http.ResponseWriter, r *http.Request) {
	data := struct {
		page
		Inbox, Parked, Problem string
		Rows                   []inboxRow
	}{page: c.page(r, "Inbox")}
	if c.inbox == nil {
		data.Problem = "no inbox table: start the console with --inbox-table"
		c.render(w, "inbox", data)
		return
	}
	data.Inbox, data.Parked = c.inbox.Name(), c.inbox.ParkedName()
	stats, err := c.inbox.ConsumerStats(r.Context())
	if err == nil {
		var parked map[string]int64
		if parked, err = c.inbox.ParkedCounts(r.Context()); err == nil {
			data.Rows = inboxRows(stats, parked)
		}
	}
	if err != nil {
		// Most often the table does not exist: say so on the page, which
		// still works for the outbox.
		c.log.Warn("outbox console: reading the inbox table failed", "error", err)
		data.Problem = fmt.Sprintf("cannot read the inbox table %s: %v (run `outbox inbox migrate`, or start the console with --inbox-table)", c.inbox.Name(), err)
	}
	c.render(w, "inbox", data)
}

// inboxRows joins the record counts and the parked counts by consumer; a
// consumer may have parked messages and no records.
func inboxRows(stats []outboxdriver.InboxConsumerStats, parked map[string]int64) []inboxRow {
	rows := make([]inboxRow, 0, len(stats))
	seen := map[string]bool{}
	for _, st := range stats {
		rows = append(rows, inboxRow{InboxConsumerStats: st, Parked: parked[st.Consumer]})
		seen[st.Consumer] = true
	}
	for consumer, n := range parked {
		if !seen[consumer] {
			rows = append(rows, inboxRow{InboxConsumerStats: outboxdriver.InboxConsumerStats{Consumer: consumer}, Parked: n})
		}
	}
	return rows
}

// parkedPage lists the messages one consumer parked.
func (c *console) parkedPage(w http.ResponseWriter, r *http.Request) {
	if c.inbox == nil {
		http.Error(w, "no inbox table: start the console with --inbox-table", http.StatusNotFound)
		return
	}
	consumer := r.URL.Query().Get("consumer")
	if consumer == "" {
		http.Error(w, "name the consumer: /inbox/parked?consumer=NAME", http.StatusBadRequest)
		return
	}
	rows, err := c.inbox.ListParked(r.Context(), consumer, uuid.Nil, consoleParkedRows)
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "parked", struct {
		page
		Consumer string
		Rows     []outbox.ParkedMessage
		Max      int
	}{c.page(r, "Parked: "+consumer), consumer, rows, consoleParkedRows})
}

// retryParked asks the running consumer to handle parked messages again:
// those the form names (one row's Retry, or every row the page showed), and
// never one parked after the page was read.
func (c *console) retryParked(w http.ResponseWriter, r *http.Request, line *auditLine) {
	if c.inbox == nil {
		http.Error(w, "no inbox table: start the console with --inbox-table", http.StatusNotFound)
		return
	}
	line.table = c.inbox.ParkedName()
	consumer := r.PostFormValue("consumer")
	line.add(slog.String("consumer", consumer))
	if consumer == "" {
		http.Error(w, "name the consumer", http.StatusBadRequest)
		return
	}
	ids, err := parkedIDs(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	line.ids(ids)
	if len(ids) == 0 {
		http.Error(w, "name the parked messages to retry", http.StatusBadRequest)
		return
	}
	if err := retryKeepsKeyOrder(r.Context(), c.inbox, consumer, ids, false, false); err != nil {
		refuseOutOfOrder(w, err, "outbox inbox parked retry --consumer "+consumer+" --force ID")
		return
	}
	n, err := c.inbox.RequestRetry(r.Context(), consumer, ids...)
	if err != nil {
		c.fail(w, err)
		return
	}
	line.changed = n
	http.Redirect(w, r, c.base+"/inbox/parked?"+url.Values{"consumer": {consumer}, "done": {"retry-parked"}, "n": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
}
