package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// consoleReplayLimit is the most messages one replay from the console
// makes pending again, as `outbox replay` without --limit.
const consoleReplayLimit = replayLimitDefault

// replayForm is what the Replay page's form holds, as typed.
type replayForm struct {
	Topic, Key, Since, Until, IDs string
	All                           bool
	// timesFixed: Since and Until are the window the count fixed (the
	// confirmation's form), which bound "every kept message" too.
	timesFixed bool
}

func replayFormOf(v url.Values) replayForm {
	return replayForm{Topic: strings.TrimSpace(v.Get("topic")), Key: strings.TrimSpace(v.Get("key")), Since: strings.TrimSpace(v.Get("since")),
		Until: strings.TrimSpace(v.Get("until")), IDs: strings.TrimSpace(v.Get("ids")), All: v.Get("all") != ""}
}

// filter is the form's choice checked as `outbox replay` checks its flags.
func (f replayForm) filter(now time.Time) (outboxdriver.ReplayFilter, error) {
	return replayChoice{ids: strings.Fields(strings.ReplaceAll(f.IDs, ",", " ")), topic: f.Topic, key: f.Key, since: f.Since, until: f.Until, all: f.All, timesFixed: f.timesFixed}.filter(now)
}

// replayPage shows the Replay form and, once asked to count (a dry run, as
// `outbox replay --dry-run`), how many kept messages match, with the form
// that replays them. Counting changes nothing, so it is a GET; the count
// fixes the times it was made with (a "2h" becomes the time it meant, and
// an open end the time of the count), so that the replay acts on what was
// counted.
func (c *console) replayPage(w http.ResponseWriter, r *http.Request) {
	st, err := c.admin.Stats(r.Context())
	if err != nil {
		c.fail(w, err)
		return
	}
	q := r.URL.Query()
	data := struct {
		page
		Form                  replayForm
		Kept                  int64
		Counted, Limit        int
		Asked, Over           bool
		Problem, Since, Until string
	}{page: c.page(r, "Replay"), Form: replayFormOf(q), Kept: st.Published, Counted: -1, Limit: consoleReplayLimit}
	if q.Get("count") == "" {
		c.render(w, "replay", data)
		return
	}
	data.Asked = true
	replayer, ok := c.admin.(outboxdriver.Replayer)
	if !ok {
		data.Problem = "this store cannot replay messages"
		c.render(w, "replay", data)
		return
	}
	now := time.Now()
	f, err := data.Form.filter(now)
	if err != nil {
		data.Problem = err.Error()
		w.WriteHeader(http.StatusBadRequest)
		c.render(w, "replay", data)
		return
	}
	if f.WrittenBefore.IsZero() {
		f.WrittenBefore = now
	}
	if !f.WrittenFrom.IsZero() {
		data.Since = f.WrittenFrom.UTC().Format(time.RFC3339Nano)
	}
	data.Until = f.WrittenBefore.UTC().Format(time.RFC3339Nano)
	if data.Counted, err = replayer.Replay(r.Context(), f, consoleReplayLimit, true); err != nil {
		c.fail(w, err)
		return
	}
	data.Over = data.Counted > consoleReplayLimit
	c.render(w, "replay", data)
}

// replay makes pending again the kept messages the form chooses, at most as
// many as the page counted (a message published since, written before the
// count's end, is left for another replay), and refuses over
// consoleReplayLimit as `outbox replay` does.
func (c *console) replay(w http.ResponseWriter, r *http.Request, line *auditLine) {
	form := replayFormOf(r.PostForm)
	form.timesFixed = true
	counted, err := strconv.Atoi(r.PostForm.Get("counted"))
	line.add(slog.String("topic", form.Topic), slog.String("key", form.Key), slog.String("since", form.Since), slog.String("until", form.Until),
		slog.Int("ids", len(strings.Fields(strings.ReplaceAll(form.IDs, ",", " ")))), slog.Bool("all", form.All), slog.Int("counted", counted))
	if err != nil || counted < 0 {
		http.Error(w, "the form does not say how many messages the page counted: count them again on the Replay page", http.StatusBadRequest)
		return
	}
	f, err := form.filter(time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if counted > consoleReplayLimit {
		http.Error(w, fmt.Sprintf("refused: %d published messages match, more than %d: narrow the choice (topic, key, since, until), or replay them with `outbox replay --limit N`", counted, consoleReplayLimit), http.StatusConflict)
		return
	}
	replayer, ok := c.admin.(outboxdriver.Replayer)
	if !ok {
		http.Error(w, "this store cannot replay messages", http.StatusNotImplemented)
		return
	}
	n := 0
	if counted > 0 {
		if n, err = replayer.Replay(r.Context(), f, counted, false); err != nil {
			c.fail(w, fmt.Errorf("replay: %w", err))
			return
		}
	}
	line.changed = n
	http.Redirect(w, r, c.base+"/replay?"+url.Values{"done": {"replay"}, "n": {strconv.Itoa(n)}}.Encode(), http.StatusSeeOther)
}
