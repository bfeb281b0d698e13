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
		Short: "Show pending, in-flight, dead and kept messages and the relay's lag",
		Args:  cobra.NoArgs,
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
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(map[string]any{
					"table": b.store.Name(), "pending": st.Pending, "in_flight": st.InFlight, "dead": st.Dead,
					"published_kept": st.Published, "oldest_pending_seconds": st.OldestPending.Seconds(), "behind_dead": st.BehindDead,
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
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}
