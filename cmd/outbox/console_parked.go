package main

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// parkedMessage shows one parked message: what the consumer got (payload,
// headers), why it parked it (the whole error, the attempts) and where it
// stands in its key, with its retry and discard.
func (c *console) parkedMessage(w http.ResponseWriter, r *http.Request) {
	if c.inbox == nil {
		http.Error(w, "no inbox table: start the console with --inbox-table", http.StatusNotFound)
		return
	}
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a message id", http.StatusBadRequest)
		return
	}
	// Without a consumer the table finds the one that parked it, and says
	// so when several did.
	consumer := r.URL.Query().Get("consumer")
	p, err := c.inbox.GetParked(r.Context(), consumer, id)
	if errors.Is(err, outbox.ErrNotFound) {
		http.Error(w, "no parked message "+id.String()+" (retried with success, discarded, or never parked by this consumer)", http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, err)
		return
	}
	kind, payload := showPayload(p.Payload)
	order := keyOrder(p)
	switch {
	case order != "":
	case p.Key == "":
		order = "no key: held in no order"
	default:
		order = "first parked of its key: in key order, the later messages of its key wait behind it"
	}
	behind := ""
	if p.Waiting && p.Behind != uuid.Nil {
		behind = p.Behind.String()
	}
	c.render(w, "parked-message", struct {
		page
		P                    outbox.ParkedMessage
		PayloadKind, Payload string
		KeyOrder, Behind     string
	}{c.page(r, "Parked "+p.ID.String()), p, kind, payload, order, behind})
}

// parkedIDs are the message ids a parked form names.
func parkedIDs(r *http.Request) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	for _, v := range r.PostForm["id"] {
		id, err := uuid.Parse(v)
		if err != nil {
			return nil, errors.New("not a message id: " + strconv.Quote(v))
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// discardParked deletes parked messages for good, as `outbox inbox parked
// discard` does: one a consumer process took is in its handler and is
// refused (the console has no --taken: taking it back is the CLI's, where
// the risk is spelt out). A discarded head lets its key go on.
func (c *console) discardParked(w http.ResponseWriter, r *http.Request, line *auditLine) {
	if c.inbox == nil {
		http.Error(w, "no inbox table: start the console with --inbox-table", http.StatusNotFound)
		return
	}
	line.table = c.inbox.ParkedName()
	consumer := r.PostFormValue("consumer")
	line.add(slog.String("consumer", consumer))
	ids, err := parkedIDs(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	line.ids(ids)
	if consumer == "" || len(ids) == 0 {
		http.Error(w, "name the consumer and the parked messages to discard", http.StatusBadRequest)
		return
	}
	for _, id := range ids {
		p, err := c.inbox.GetParked(r.Context(), consumer, id)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // gone already: the count says so
		}
		if err != nil {
			c.fail(w, err)
			return
		}
		if err := notTaken(p, "discard"); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
	}
	n, err := c.inbox.DiscardParked(r.Context(), consumer, ids...)
	if err != nil {
		c.fail(w, err)
		return
	}
	line.changed = n
	http.Redirect(w, r, c.base+"/inbox/parked?"+url.Values{"consumer": {consumer}, "done": {"discard-parked"}, "n": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
}
