package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

// tableStatus is one table's line of `outbox status --tables`.
type tableStatus struct {
	name     string
	stats    outboxdriver.Stats
	relays   relayReport
	err      error // its stats could not be read (not migrated, say)
	warnings []string
}

// statusOfTables reads each table's counts and relays, for `outbox status
// --tables`, the tables in the source's order. A table that cannot be read
// has its error in its line; the others are read all the same.
func statusOfTables(ctx context.Context, stores []outboxdriver.Store, stuckAfter time.Duration) []tableStatus {
	out := make([]tableStatus, 0, len(stores))
	for _, s := range stores {
		ts := tableStatus{name: s.Name()}
		admin, ok := s.(outboxdriver.Admin)
		if !ok {
			ts.err = fmt.Errorf("this store cannot count its messages")
			out = append(out, ts)
			continue
		}
		if checker, ok := s.(outboxdriver.SchemaChecker); ok {
			// As the relay's start check: a table it refuses is said to
			// be refused, not shown as if its relays had stopped.
			if err := checker.CheckSchema(ctx); err != nil {
				ts.err = fmt.Errorf("a relay refuses it: %w (run `outbox migrate up --schema %s`)", err, schemaOf(s.Name()))
				out = append(out, ts)
				continue
			}
		}
		if ts.stats, ts.err = admin.Stats(ctx); ts.err == nil {
			ts.relays = readRelays(ctx, admin)
			ts.warnings = nonEmpty(ts.relays.alarm(ts.stats.Pending), noProgress(ts.stats, ts.relays, stuckAfter))
		}
		out = append(out, ts)
	}
	return out
}

// printTablesStatus writes `outbox status --tables`: a line per table,
// the totals, and each table's warnings.
func printTablesStatus(w io.Writer, pattern string, tables []tableStatus) {
	fmt.Fprintf(w, "tables          %d matching %s\n", len(tables), pattern)
	if len(tables) == 0 {
		fmt.Fprintf(w, "WARNING: no schema matching %s has the table: check the pattern, or create the tables with `outbox migrate up --schema S`\n", pattern)
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tPENDING\tIN FLIGHT\tDEAD\tOLDEST PENDING\tLIVE RELAYS")
	var total outboxdriver.Stats
	live := 0
	for _, t := range tables {
		if t.err != nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\n", t.name)
			continue
		}
		relays := "?" // the registry could not be read: its warning follows
		if t.relays.err == nil {
			relays = fmt.Sprint(t.relays.live)
			live += t.relays.live
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\n", t.name, t.stats.Pending, t.stats.InFlight, t.stats.Dead, t.stats.OldestPending.Round(time.Millisecond), relays)
		total.Pending += t.stats.Pending
		total.InFlight += t.stats.InFlight
		total.Dead += t.stats.Dead
		total.OldestPending = max(total.OldestPending, t.stats.OldestPending)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%s\t%d\n", total.Pending, total.InFlight, total.Dead, total.OldestPending.Round(time.Millisecond), live)
	_ = tw.Flush()
	for _, t := range tables {
		if t.err != nil {
			fmt.Fprintf(w, "WARNING: %s: cannot read it: %v\n", t.name, t.err)
		}
		if t.err == nil && t.relays.err != nil {
			fmt.Fprintf(w, "WARNING: %s: its relays are unknown: %v\n", t.name, t.relays.err)
		}
		for _, warning := range t.warnings {
			fmt.Fprintf(w, "WARNING: %s: %s\n", t.name, warning)
		}
	}
}

// encodeTablesStatus writes `outbox status --tables --json`: one object
// with a member per table.
func encodeTablesStatus(w io.Writer, pattern string, tables []tableStatus) error {
	list := make([]map[string]any, 0, len(tables))
	for _, t := range tables {
		if t.err != nil {
			list = append(list, map[string]any{"table": t.name, "error": t.err.Error()})
			continue
		}
		list = append(list, map[string]any{
			"table": t.name, "pending": t.stats.Pending, "in_flight": t.stats.InFlight, "dead": t.stats.Dead,
			"published_kept": t.stats.Published, "oldest_pending_seconds": t.stats.OldestPending.Seconds(),
			"behind_dead": t.stats.BehindDead, "relays": t.relays.json(), "warnings": t.warnings,
		})
	}
	return json.NewEncoder(w).Encode(map[string]any{"pattern": pattern, "tables": list})
}

// schemaOf is the schema of a table named SCHEMA.TABLE.
func schemaOf(name string) string {
	schema, _, _ := strings.Cut(name, ".")
	return schema
}
