package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// consolePauseReason bounds a pause's reason: it is shown in lists and
// written to the audit line, which must stay a line.
const consolePauseReason = 500

// pausedView is the paused topics of a table as the Paused page and the
// overview show them, or why they cannot be read (with the fix).
type pausedView struct {
	// Link is the path of the table's Paused page, for the overview.
	Link string
	// Paused are the paused topics; Resumed the topics not paused with
	// messages still held out of the relays' reach.
	Paused, Resumed []pausedLine
	// Problem says why the store cannot list or pause topics ("" when it
	// can): a store without pausing, or a table migrated before it.
	Problem string
}

// pausedLine is one topic of the list, its pause time said as an age.
type pausedLine struct {
	outboxdriver.PausedTopic
	Since, At string
}

// readPausedTopics lists the paused topics of the store behind admin. A
// store that cannot pause, or a table without the paused topics table, is
// a Problem of the view, not an error: the page says what to do.
func readPausedTopics(ctx context.Context, admin outboxdriver.Admin, base string, now time.Time) (pausedView, error) {
	view := pausedView{Link: base + "/paused"}
	p, ok := admin.(outboxdriver.TopicPauser)
	if !ok {
		view.Problem = "This store cannot pause topics."
		return view, nil
	}
	list, err := p.PausedTopics(ctx)
	switch {
	case errors.Is(err, outboxdriver.ErrNotMigrated):
		view.Problem = "The table has no paused topics table yet, so no topic can be paused: run `outbox migrate up` (" + err.Error() + ")."
		return view, nil
	case err != nil:
		return view, err
	}
	for _, t := range list {
		line := pausedLine{PausedTopic: t}
		if t.Resumed {
			view.Resumed = append(view.Resumed, line)
			continue
		}
		line.Since, line.At = ago(now, t.At), t.At.UTC().Format(time.RFC3339)
		view.Paused = append(view.Paused, line)
	}
	return view, nil
}

// pausedPage lists the paused topics, with a Resume button each, the
// topics resumed with messages still held, and the form that pauses one.
func (c *console) pausedPage(w http.ResponseWriter, r *http.Request) {
	view, err := readPausedTopics(r.Context(), c.admin, c.base, time.Now())
	if err != nil {
		c.fail(w, err)
		return
	}
	c.render(w, "paused", struct {
		page
		pausedView
		ReasonMax int
	}{c.page(r, "Paused topics"), view, consolePauseReason})
}

// pauseTopic pauses the form's topic for its reason, by the console's
// user, and is sent back to the Paused page with how many messages it
// moved out of the relays' reach.
func (c *console) pauseTopic(w http.ResponseWriter, r *http.Request, line *auditLine) {
	topic, reason := strings.TrimSpace(r.PostForm.Get("topic")), strings.TrimSpace(r.PostForm.Get("reason"))
	line.add(slog.String("topic", oneLine(topic, outbox.MaxTopicLength)), slog.String("reason", oneLine(reason, consolePauseReason)))
	switch {
	case topic == "":
		http.Error(w, "topic: name the topic to pause", http.StatusBadRequest)
		return
	case len(topic) > outbox.MaxTopicLength:
		http.Error(w, fmt.Sprintf("topic: at most %d bytes, as a message's topic (this one has %d)", outbox.MaxTopicLength, len(topic)), http.StatusBadRequest)
		return
	case len(reason) > consolePauseReason:
		http.Error(w, fmt.Sprintf("reason: at most %d bytes (this one has %d)", consolePauseReason, len(reason)), http.StatusBadRequest)
		return
	}
	c.pauseOrResume(w, r, line, "pause", func(ctx context.Context, p outboxdriver.TopicPauser) (int, error) {
		return p.PauseTopic(ctx, topic, pausedBy(r), reason)
	})
}

// resumeTopic resumes the form's topic: its messages, and every other
// paused message no paused topic holds any more, are due again.
func (c *console) resumeTopic(w http.ResponseWriter, r *http.Request, line *auditLine) {
	topic := strings.TrimSpace(r.PostForm.Get("topic"))
	line.add(slog.String("topic", oneLine(topic, outbox.MaxTopicLength)))
	if topic == "" {
		http.Error(w, "topic: name the topic to resume", http.StatusBadRequest)
		return
	}
	c.pauseOrResume(w, r, line, "resume", func(ctx context.Context, p outboxdriver.TopicPauser) (int, error) {
		return p.ResumeTopic(ctx, topic)
	})
}

// pauseOrResume runs do, the change done, against the store, and sends the
// browser back to the Paused page saying how many messages it moved.
func (c *console) pauseOrResume(w http.ResponseWriter, r *http.Request, line *auditLine, done string, do func(context.Context, outboxdriver.TopicPauser) (int, error)) {
	p, ok := c.admin.(outboxdriver.TopicPauser)
	if !ok {
		http.Error(w, "refused: this store cannot pause topics", http.StatusNotImplemented)
		return
	}
	n, err := do(r.Context(), p)
	switch {
	case errors.Is(err, outboxdriver.ErrNotMigrated):
		http.Error(w, "refused: "+err.Error(), http.StatusConflict)
		return
	case err != nil:
		c.fail(w, fmt.Errorf("%s: %w", done, err))
		return
	}
	line.changed = n
	http.Redirect(w, r, c.base+"/paused?"+url.Values{"done": {done}, "n": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
}

// pausedBy names who pauses from the console, for the paused topics' list:
// the user who logged in, or "console" when the console asks for no login.
func pausedBy(r *http.Request) string {
	if u := userOf(r); u != userAnonymous {
		return u
	}
	return "console"
}
