package main

import (
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/uuid"
)

const (
	// consoleReadOnly answers a change asked of a read-only console.
	consoleReadOnly = "refused: the console runs read-only (--read-only): it shows the tables and changes nothing; " +
		"retry, discard, replay, pause or resume with the outbox command (outbox dead retry|discard, outbox inbox parked retry|discard, outbox replay, outbox pause|resume), " +
		"or restart the console without --read-only"
	// consoleAuditIDs bounds the ids one audit line lists; it counts them
	// all.
	consoleAuditIDs = 200
	// consoleAuditError bounds the answer an audit line quotes.
	consoleAuditError = 300
)

// auditLine is what a change did, for its audit line.
type auditLine struct {
	action  string
	attrs   []slog.Attr // what besides action and table: ids or filter, consumer
	changed int         // how many messages it changed
	table   string
}

// add notes what the change is about.
func (a *auditLine) add(attrs ...slog.Attr) { a.attrs = append(a.attrs, attrs...) }

// ids notes the messages the change was asked for: how many, and which (the
// first consoleAuditIDs of them, so that a line stays a line).
func (a *auditLine) ids(ids []uuid.UUID) {
	shown := make([]string, 0, min(len(ids), consoleAuditIDs))
	for _, id := range ids[:min(len(ids), consoleAuditIDs)] {
		shown = append(shown, id.String())
	}
	a.add(slog.Any("ids", shown), slog.Int("messages", len(ids)))
}

// change serves a POST that changes messages. It refuses it on a read-only
// console and without the page's token, and writes one audit line whatever
// the answer: who asked (user, remote address), what (action, table, ids or
// filter), and the outcome, from the status of the answer.
func (c *console) change(action string, next func(http.ResponseWriter, *http.Request, *auditLine)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		aw := &auditWriter{ResponseWriter: w}
		line := &auditLine{action: action, table: c.table}
		defer c.audit(r, line, aw)
		switch {
		case c.readOnly:
			http.Error(aw, consoleReadOnly, http.StatusForbidden)
		case subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(c.csrf)) != 1:
			http.Error(aw, "missing or wrong form token: reload the console page and try again", http.StatusForbidden)
		default:
			next(aw, r, line)
		}
	}
}

// audit writes the audit line of a change answered through w.
func (c *console) audit(r *http.Request, line *auditLine, w *auditWriter) {
	outcome := "done"
	switch {
	case w.status >= 500:
		outcome = "failed"
	case w.status >= 400:
		outcome = "refused"
	}
	attrs := append([]slog.Attr{
		slog.Bool("audit", true),
		slog.String("user", userOf(r)),
		slog.String("remote", r.RemoteAddr),
		slog.String("action", line.action),
		slog.String("table", line.table),
	}, line.attrs...)
	attrs = append(attrs, slog.String("outcome", outcome), slog.Int("changed", line.changed), slog.Int("status", w.status))
	if outcome != "done" {
		attrs = append(attrs, slog.String("error", strings.TrimSpace(string(w.body))))
	}
	c.log.LogAttrs(r.Context(), slog.LevelInfo, "outbox console: audit", attrs...)
}

// auditWriter keeps the status of an answer, and the start of its text
// when it is an error, for the audit line.
type auditWriter struct {
	http.ResponseWriter
	body   []byte
	status int
}

func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && len(w.body) < consoleAuditError {
		w.body = append(w.body, p[:min(len(p), consoleAuditError-len(w.body))]...)
	}
	return w.ResponseWriter.Write(p)
}
