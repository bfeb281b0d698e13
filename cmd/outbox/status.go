package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newStatusCommand(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show pending, in-flight, dead and kept messages, the relay's lag and the live relays",
		Long: `status shows the table's counts (pending, in flight, dead, kept) and the age of its oldest
pending message, and the relays registered in the table's relay registry: each running relay
refreshes its row every heartbeat (10s by default); one not seen for three heartbeats is shown as
GONE (killed, or its host died); a relay that stops cleanly removes its row. It warns when
messages are pending and no relay is live. Relays of releases before the registry (and tables not
migrated to it: run ` + "`outbox migrate up`" + `) are not listed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			alarm := relays.alarm(st.Pending)
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{
					"table": b.store.Name(), "pending": st.Pending, "in_flight": st.InFlight, "dead": st.Dead,
					"published_kept": st.Published, "oldest_pending_seconds": st.OldestPending.Seconds(), "behind_dead": st.BehindDead,
					"relays": relays.json(), "warnings": nonEmpty(alarm),
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
			relays.print(out)
			if alarm != "" {
				fmt.Fprintf(out, "WARNING: %s\n", alarm)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
