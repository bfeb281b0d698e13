package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newStatusCommand(g *globalFlags) *cobra.Command {
	var (
		asJSON     bool
		stuckAfter time.Duration
		stuckKeys  int
		tables     string
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show pending, in-flight, dead and kept messages, the relay's lag and the live relays",
		Long: `status shows the table's counts (pending, in flight, dead, kept) and the age of its oldest
pending message, and the relays registered in the table's relay registry: each running relay
refreshes its row every heartbeat (10s by default); one not seen for three heartbeats is shown as
GONE (killed, or its host died); a relay that stops cleanly removes its row. It warns when
messages are pending and no relay is live. Relays of releases before the registry (and tables not
migrated to it: run ` + "`outbox migrate up`" + `) are not listed.

It lists the stuck keys: keys whose head (oldest pending message) was written more than
--stuck-after ago, with what holds each (retrying and its last error, a dead message before it, or
no relay reaching it), and warns of no progress: messages pending longer than --stuck-after while
no registered relay published anything for as long.

With --tables 'tenant_*.outbox' (PostgreSQL), it shows a line per table the pattern matches, as
` + "`outbox relay --tables`" + ` serves them: pending, in flight, dead, oldest pending and live relays, the
totals, and each table's warnings; ` + "`outbox status --schema S`" + ` shows one table in full.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if stuckAfter <= 0 {
				return usagef("--stuck-after %s: use a positive duration, e.g. 5m", stuckAfter)
			}
			if stuckKeys < 0 {
				return usagef("--stuck-keys %d: use 0 or more", stuckKeys)
			}
			if tables != "" {
				if cmd.Flags().Changed("stuck-keys") {
					return usagef("--stuck-keys lists one table's stuck keys: not with --tables; use outbox status --schema S for a table's")
				}
				return statusOfPattern(cmd, g, tables, stuckAfter, asJSON)
			}
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			st, err := b.admin.Stats(cmd.Context())
			if err != nil {
				return err
			}
			relays := readRelays(cmd.Context(), b.admin)
			stuck := readStuckKeys(cmd.Context(), b.admin, stuckAfter, stuckKeys)
			paused := readPaused(cmd.Context(), b.admin)
			hour := readLastHour(cmd.Context(), b.admin)
			warnings := nonEmpty(relays.alarm(st.Pending), noProgress(st, relays, stuckAfter))
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{
					"table": b.store.Name(), "pending": st.Pending, "in_flight": st.InFlight, "dead": st.Dead,
					"published_kept": st.Published, "oldest_pending_seconds": st.OldestPending.Seconds(), "behind_dead": st.BehindDead,
					"relays": relays.json(), "stuck_keys": stuck.json(), "paused_topics": paused, "warnings": warnings,
					"last_hour": hour.json(),
				})
			}
			fmt.Fprintf(out, "table           %s\n", b.store.Name())
			fmt.Fprintf(out, "pending         %d\n", st.Pending)
			fmt.Fprintf(out, "in flight       %d\n", st.InFlight)
			fmt.Fprintf(out, "dead            %d\n", st.Dead)
			if st.BehindDead > 0 {
				fmt.Fprintf(out, "behind dead     %d (pending messages waiting, in key order, behind a dead message of their key: retry or discard it with `outbox dead`)\n", st.BehindDead)
			}
			fmt.Fprintf(out, "published kept  %d\n", st.Published)
			fmt.Fprintf(out, "oldest pending  %s\n", st.OldestPending.Round(time.Millisecond))
			hour.print(out)
			stuck.print(out)
			if len(paused) > 0 {
				fmt.Fprintf(out, "paused topics   %d (their messages are pending, and no relay publishes them until `outbox resume`; see `outbox paused`)\n", len(paused))
				printPaused(out, paused, time.Now())
			}
			relays.print(out)
			for _, w := range warnings {
				fmt.Fprintf(out, "WARNING: %s\n", w)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().DurationVar(&stuckAfter, "stuck-after", 5*time.Minute, "a key whose head waited longer is stuck, and pending messages this old with nothing published for as long are no progress")
	cmd.Flags().IntVar(&stuckKeys, "stuck-keys", 5, "how many stuck keys to list, the longest waiting first")
	cmd.Flags().StringVar(&tables, "tables", "", "PostgreSQL: a line for each outbox table SCHEMA.TABLE matches, where * in SCHEMA matches any characters (e.g. 'tenant_*.outbox'), as outbox relay --tables finds them; not with --stuck-keys")
	return cmd
}

// statusOfPattern is `outbox status --tables`: the tables the pattern
// raw matches, a line each.
func statusOfPattern(cmd *cobra.Command, g *globalFlags, raw string, stuckAfter time.Duration, asJSON bool) error {
	schemas, table, err := tablesPattern(raw)
	if err != nil {
		return err
	}
	src, closeSource, err := g.openTables(cmd.Context(), schemas, table, storeMode{})
	if err != nil {
		return err
	}
	defer closeSource()
	stores, err := src.Tables(cmd.Context())
	if err != nil {
		return err
	}
	statuses := statusOfTables(cmd.Context(), stores, stuckAfter)
	if asJSON {
		return encodeTablesStatus(cmd.OutOrStdout(), raw, statuses)
	}
	printTablesStatus(cmd.OutOrStdout(), raw, statuses)
	return nil
}
