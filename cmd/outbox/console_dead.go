package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// deadFilter selects dead messages by exact topic, error text and group
// (of groupDead).
type deadFilter struct{ topic, query, group string }

func filterOf(v url.Values) deadFilter {
	return deadFilter{topic: strings.TrimSpace(v.Get("topic")), query: strings.TrimSpace(v.Get("q")), group: strings.TrimSpace(v.Get("group"))}
}

// match reports whether m passes the topic and error filters; members, when
// the filter names a group, are its messages.
func (f deadFilter) match(m outbox.Message, members map[uuid.UUID]bool) bool {
	return (f.topic == "" || m.Topic == f.topic) &&
		(f.query == "" || strings.Contains(strings.ToLower(m.LastError), strings.ToLower(f.query))) &&
		(f.group == "" || members[m.ID])
}

// values is f as a query string's values, for links back to the list.
func (f deadFilter) values() url.Values {
	v := url.Values{"topic": {f.topic}, "q": {f.query}}
	if f.group != "" {
		v.Set("group", f.group)
	}
	return v
}

// matches reads up to consoleScanLimit dead messages and returns those f
// selects, and whether it stopped at the limit. A group is found among
// groups, or read when groups is nil.
func (c *console) matches(ctx context.Context, f deadFilter, groups []*deadGroup) (found []outbox.Message, scanned int, truncated bool, err error) {
	members := map[uuid.UUID]bool{}
	if f.group != "" {
		if groups == nil {
			if groups, _, err = groupDead(ctx, c.admin); err != nil {
				return nil, 0, false, err
			}
		}
		for _, g := range groups {
			if g.ID == f.group {
				for _, id := range g.IDs {
					members[id] = true
				}
			}
		}
	}
	after := uuid.Nil
	for scanned < consoleScanLimit {
		page, err := c.admin.ListDead(ctx, after, min(500, consoleScanLimit-scanned))
		if err != nil {
			return nil, scanned, false, err
		}
		for _, m := range page {
			if f.match(m, members) {
				found = append(found, m)
			}
		}
		scanned += len(page)
		if len(page) < 500 {
			return found, scanned, false, nil
		}
		after = page[len(page)-1].ID
	}
	return found, scanned, true, nil
}

// deadList shows the dead letters grouped by how they failed, each group
// with its retry and discard, then the messages that match the filter.
func (c *console) deadList(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r.URL.Query())
	groups, groupsTruncated, err := groupDead(r.Context(), c.admin)
	if err != nil {
		c.fail(w, err)
		return
	}
	found, scanned, truncated, err := c.matches(r.Context(), f, groups)
	if err != nil {
		c.fail(w, err)
		return
	}
	lines := make([]groupLine, 0, len(groups))
	for _, g := range groups {
		lines = append(lines, groupLine{deadGroup: g, Members: membersDigest(g.IDs)})
	}
	rows := found[:min(len(found), consoleRows)]
	c.render(w, "dead", struct {
		page
		Topic, Query, Group, Seen string
		Groups                    []groupLine
		GroupsTruncated           bool
		GroupScanLimit            int
		Rows                      []outbox.Message
		Matches, Scanned          int
		Truncated                 bool
	}{c.page(r, "Dead letters"), f.topic, f.query, f.group, seenField(found), lines, groupsTruncated, deadGroupScanLimit,
		rows, len(found), scanned, truncated})
}

// seenField lists the ids of the matches a page counted, for its "every
// match" form to act on those only: a message that dies after the page was
// read matches the filter too, but the user never saw it. UUIDv7 ids order
// by creation, not by death, so the highest id seen would not tell it apart.
// 16 bytes an id in base64: at most some 210 KB, for consoleScanLimit ids.
func seenField(ms []outbox.Message) string {
	b := make([]byte, 0, 16*len(ms))
	for _, m := range ms {
		b = append(b, m.ID[:]...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// seenIDs decodes seenField.
func seenIDs(s string) (map[uuid.UUID]bool, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || len(b)%16 != 0 {
		return nil, errors.New("the form does not say which messages the page showed: reload the dead letters page and try again")
	}
	ids := make(map[uuid.UUID]bool, len(b)/16)
	for ; len(b) > 0; b = b[16:] {
		ids[uuid.UUID(b[:16])] = true
	}
	return ids, nil
}

func (c *console) message(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a message id", http.StatusBadRequest)
		return
	}
	m, err := c.admin.Get(r.Context(), id)
	if errors.Is(err, outbox.ErrNotFound) {
		http.Error(w, "no message "+id.String()+" (published, discarded or never written)", http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, err)
		return
	}
	kind, payload := showPayload(m.Payload)
	var (
		history      []outboxdriver.Attempt
		historyError string
	)
	if rec, ok := c.admin.(outboxdriver.AttemptRecorder); !ok {
		historyError = "this store keeps no history of failed attempts"
	} else if history, err = rec.Attempts(r.Context(), id); err != nil {
		// The page still shows the message: a table migrated before the
		// history existed has none (outbox migrate up adds it).
		historyError = err.Error()
	}
	c.render(w, "message", struct {
		page
		M                    outbox.Message
		PayloadKind, Payload string
		History              []outboxdriver.Attempt
		HistoryError         string
	}{c.page(r, m.ID.String()), m, kind, payload, history, historyError})
}

// showPayload renders a payload: indented JSON, text, or a hex dump.
func showPayload(p []byte) (kind, text string) {
	var buf bytes.Buffer
	switch {
	case json.Valid(p) && json.Indent(&buf, p, "", "  ") == nil:
		return "JSON", buf.String()
	case utf8.Valid(p):
		return "text", string(p)
	default:
		return "binary, hex", hex.Dump(p)
	}
}

func (c *console) actOnOne(w http.ResponseWriter, r *http.Request, line *auditLine) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a message id", http.StatusBadRequest)
		return
	}
	line.ids([]uuid.UUID{id})
	c.act(w, r, line, []uuid.UUID{id}, -1, "/dead")
}

func (c *console) actOnMatches(w http.ResponseWriter, r *http.Request, line *auditLine) {
	f := filterOf(r.PostForm)
	line.add(slog.String("topic", f.topic), slog.String("q", f.query))
	if f.group != "" {
		line.add(slog.String("group", f.group))
	}
	seen, err := seenIDs(r.PostForm.Get("seen"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The matches now, of which only those the page showed: the filter
	// still holds for them and they are still dead.
	found, _, _, err := c.matches(r.Context(), f, nil)
	if err != nil {
		c.fail(w, err)
		return
	}
	var ids []uuid.UUID
	for _, m := range found {
		if seen[m.ID] {
			ids = append(ids, m.ID)
		}
	}
	line.add(slog.Int("shown", len(seen)), slog.Int("messages", len(ids)))
	c.act(w, r, line, ids, len(seen), "/dead?"+f.values().Encode())
}

// act retries or discards ids, as line.action says, in batches (a retry
// that keeps key order in one call), and sends the browser back to back
// with what it did; shown is how many messages the page had shown, or -1
// when the user chose one.
func (c *console) act(w http.ResponseWriter, r *http.Request, line *auditLine, ids []uuid.UUID, shown int, back string) {
	action, _, _ := strings.Cut(line.action, "-") // retry-matching, discard-group...
	var call func(context.Context, ...uuid.UUID) (int, error)
	switch action {
	case "retry":
		call = c.admin.RetryDead
	case "discard":
		call = func(ctx context.Context, ids ...uuid.UUID) (int, error) {
			return c.claimCheck.discardDead(ctx, c.admin, ids...)
		}
	default:
		http.NotFound(w, r)
		return
	}
	done, left := 0, ids
	defer func() { line.changed = done }()
	if action == "retry" && len(ids) > 0 {
		// The console has no --force: a retry that would break a key's
		// order is the CLI's, where the count is spelt out. A store that
		// can looks at the counts in the step that retries, all ids at
		// once, so that it retries them all or none.
		var err error
		if keepOrder, ok := c.admin.(outboxdriver.KeyOrderRetrier); ok {
			var overtaken []outbox.Message
			done, overtaken, err = keepOrder.RetryDeadUnlessOvertaken(r.Context(), ids, false)
			if err != nil {
				c.fail(w, fmt.Errorf("%s: %w", action, err))
				return
			}
			left = nil // retried, or refused, whole
			err = refuseOvertaken(overtaken)
		} else {
			err = deadRetryKeepsKeyOrder(r.Context(), c.admin, ids)
		}
		if err != nil {
			refuseOutOfOrder(w, err, "outbox dead retry --force ID")
			return
		}
	}
	for start := 0; start < len(left); start += consoleBatch {
		n, err := call(r.Context(), left[start:min(start+consoleBatch, len(left))]...)
		done += n
		if err != nil {
			c.fail(w, fmt.Errorf("%s: %d of %d done, then: %w", action, done, len(ids), err))
			return
		}
	}
	result := url.Values{"done": {action}, "n": {strconv.Itoa(done)}}
	if shown >= 0 {
		result.Set("of", strconv.Itoa(shown))
	}
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, c.base+back+sep+result.Encode(), http.StatusSeeOther)
}
