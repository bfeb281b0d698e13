package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// inboxTable is what `outbox inbox` needs from a consumer's inbox table.
type inboxTable interface {
	Name() string
	Migrate(ctx context.Context) error
	PurgeProcessed(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	ConsumerStats(ctx context.Context) ([]outboxdriver.InboxConsumerStats, error)

	// The messages consumers parked beside the inbox table.
	ParkedName() string
	ListParked(ctx context.Context, consumer string, after uuid.UUID, limit int) ([]outbox.ParkedMessage, error)
	GetParked(ctx context.Context, consumer string, id uuid.UUID) (outbox.ParkedMessage, error)
	RequestRetry(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
	DiscardParked(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
	ParkedCounts(ctx context.Context) (map[string]int64, error)
	// Those a consumer process took for a retry, and keys nobody will go
	// on with.
	ForgetTaken(ctx context.Context, consumer string, ids ...uuid.UUID) (int, error)
	StalledCounts(ctx context.Context) (map[string]int64, error)
	TakenCounts(ctx context.Context) (map[string]int64, error)
}

var (
	_ inboxTable = (*outboxpg.InboxTable)(nil)
	_ inboxTable = (*outboxsqlite.InboxTable)(nil)
)

func newInboxCommand(g *globalFlags) *cobra.Command {
	var table string
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Create, inspect and purge a consumer's inbox table, and retry its parked messages",
		Long: `inbox works on the table of processed message ids that consumers keep in their own database
(outbox.Inbox), beside the outbox table that --schema and --table name: the records of the
messages whose handlers wrote messages to that outbox are kept until those are published.
Beside it, <inbox table>_parked keeps the messages consumers parked (see inbox parked).`,
	}
	cmd.PersistentFlags().StringVar(&table, "inbox-table", outboxpg.InboxTableDefault, "name of the inbox table (in --schema on PostgreSQL)")
	open := func(cmd *cobra.Command) (inboxTable, func(), error) {
		b, err := g.open(cmd.Context(), storeMode{})
		if err != nil {
			return nil, nil, err
		}
		t, err := b.inbox(cmd.Context(), table)
		if err != nil {
			b.close()
			return nil, nil, err
		}
		return t, b.close, nil
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "migrate",
			Short: "Create the inbox table and its parked table, or upgrade ones made by an older release",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				t, done, err := open(cmd)
				if err != nil {
					return err
				}
				defer done()
				if err := t.Migrate(cmd.Context()); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "inbox table %s is ready\n", t.Name())
				return nil
			},
		},
		newInboxStatusCommand(open),
		newInboxPurgeCommand(open, func(cmd *cobra.Command, pattern string) ([]inboxTable, func(), error) {
			return g.openTenantInboxes(cmd.Context(), pattern, table)
		}),
		newInboxParkedCommand(open),
	)
	return cmd
}

type openInbox func(cmd *cobra.Command) (inboxTable, func(), error)

// purgeInbox deletes t's records older than retention, batch at a time,
// and says how many; it returns how many it deleted.
func purgeInbox(cmd *cobra.Command, t inboxTable, retention time.Duration, batch int) (int, error) {
	total := 0
	for {
		n, err := t.PurgeProcessed(cmd.Context(), retention, batch)
		total += n
		if err != nil {
			return total, fmt.Errorf("purge %s: %w (%d records deleted before the failure)", t.Name(), err, total)
		}
		if n < batch {
			break
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "deleted %d records of %s so far\n", total, t.Name())
	}
	fmt.Fprintf(cmd.OutOrStdout(), "deleted %d records of %s older than %s\n", total, t.Name(), retention)
	return total, nil
}

// purgeEach purges every table in turn, going on past a table that fails,
// and then reports the total and the failures.
func purgeEach(cmd *cobra.Command, tables []inboxTable, pattern string, retention time.Duration, batch int) error {
	total, failed := 0, 0
	for _, t := range tables {
		n, err := purgeInbox(cmd, t, retention, batch)
		total += n
		if err != nil {
			failed++
			fmt.Fprintf(cmd.ErrOrStderr(), "outbox: %v\n", err)
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "deleted %d records of %d inbox tables in the schemas matching %s\n", total, len(tables), pattern)
	if failed > 0 {
		return fmt.Errorf("%d of %d inbox tables could not be purged (above); the others were", failed, len(tables))
	}
	return nil
}

func newInboxStatusCommand(open openInbox) *cobra.Command {
	var (
		asJSON     bool
		takenOlder time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count each consumer's records, those kept for pending outgoing messages, and its parked messages",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			t, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			stats, err := t.ConsumerStats(cmd.Context())
			if err != nil {
				return err
			}
			parked, err := t.ParkedCounts(cmd.Context())
			if err != nil {
				return fmt.Errorf("%w (a table made by an older release has no parked table yet: run `outbox inbox migrate`)", err)
			}
			waiting, err := waitingCounts(cmd.Context(), t)
			if err != nil {
				return err
			}
			stalled, err := t.StalledCounts(cmd.Context())
			if err != nil {
				return err
			}
			taken, err := t.TakenCounts(cmd.Context())
			if err != nil {
				return err
			}
			takenOld := map[string]int64{}
			if len(taken) > 0 {
				if takenOld, err = takenBeforeCounts(cmd.Context(), t, time.Now().Add(-takenOlder)); err != nil {
					return err
				}
			}
			stats = withParkedOnly(stats, parked)
			out := cmd.OutOrStdout()
			if asJSON {
				rows := make([]map[string]any, len(stats))
				for i, st := range stats {
					rows[i] = map[string]any{"consumer": st.Consumer, "records": st.Records,
						"awaiting_outgoing": st.AwaitingOutgoing, "duplicates": st.Duplicates, "oldest_seconds": st.OldestAge.Seconds(), "parked": parked[st.Consumer], "waiting": waiting[st.Consumer],
						"taken": taken[st.Consumer], "taken_older": takenOld[st.Consumer], "stalled": stalled[st.Consumer]}
				}
				return json.NewEncoder(out).Encode(map[string]any{"table": t.Name(), "parked_table": t.ParkedName(), "consumers": rows})
			}
			fmt.Fprintf(out, "inbox table %s\n", t.Name())
			if len(stats) == 0 {
				fmt.Fprintln(out, "no records")
				return nil
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			// WAITING counts the parked messages held behind another of
			// their key (key order), among PARKED; TAKEN those a consumer
			// process has in a handler for a retry; STALLED the waiting
			// first messages of keys that nobody requested nor took.
			fmt.Fprintln(tw, "CONSUMER\tRECORDS\tDUPLICATES\tAWAITING OUTGOING\tOLDEST\tPARKED\tWAITING\tTAKEN\tSTALLED")
			for _, st := range stats {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\n", st.Consumer, st.Records, st.Duplicates, st.AwaitingOutgoing, st.OldestAge.Round(time.Second),
					parked[st.Consumer], waiting[st.Consumer], taken[st.Consumer], stalled[st.Consumer])
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, st := range stats {
				if n := stalled[st.Consumer]; n > 0 {
					fmt.Fprintf(out, "%s: %d key(s) stalled: the next message of each waits and nothing will apply it; "+
						"find them (\"stalled\" in `outbox inbox parked list --consumer %s`) and retry each with `outbox inbox parked retry --consumer %s ID`\n",
						st.Consumer, n, st.Consumer, st.Consumer)
				}
				if n := takenOld[st.Consumer]; n > 0 {
					fmt.Fprintf(out, "%s: %d message(s) taken over %s ago: likely left by a dead process: "+
						"take them back and retry them with `outbox inbox parked retry --consumer %s --taken-older-than %s` (a process that still runs would handle them twice)\n",
						st.Consumer, n, takenOlder, st.Consumer, takenOlder)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	cmd.Flags().DurationVar(&takenOlder, "taken-older-than", takenOlderDefault, "flag the parked messages a consumer process took longer ago than this "+
		"(taken_older in --json): likely left by a dead process")
	return cmd
}

// withParkedOnly adds to stats, in consumer order, a row for each consumer
// that has parked messages and no records.
func withParkedOnly(stats []outboxdriver.InboxConsumerStats, parked map[string]int64) []outboxdriver.InboxConsumerStats {
	for consumer := range parked {
		if !slices.ContainsFunc(stats, func(st outboxdriver.InboxConsumerStats) bool { return st.Consumer == consumer }) {
			stats = append(stats, outboxdriver.InboxConsumerStats{Consumer: consumer})
		}
	}
	slices.SortFunc(stats, func(a, b outboxdriver.InboxConsumerStats) int { return strings.Compare(a.Consumer, b.Consumer) })
	return stats
}

// openInboxes opens the inbox tables of every schema a pattern matches.
type openInboxes func(cmd *cobra.Command, pattern string) ([]inboxTable, func(), error)

func newInboxPurgeCommand(open openInbox, across openInboxes) *cobra.Command {
	var retention time.Duration
	var batch int
	var schemas string
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete the records older than the retention, in batches",
		Long: `purge deletes the records whose message's effects were complete more than --retention ago:
its handling committed and the messages its handler wrote to the outbox were published. A record
whose outgoing messages are still pending is kept. A message redelivered after its record is gone
is applied again, so keep records far longer than the broker redelivers. Consumers can purge by
themselves instead (outbox.PurgeInbox).

With --schemas 'tenant_*' (PostgreSQL), it purges the inbox table of every schema the pattern
matches, one after the other, each against the outbox table of its own schema; a table it cannot
purge is reported and the others are purged all the same (the exit code is then 1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if retention < 0 {
				return usagef("--retention %s: use a positive duration, e.g. 336h (14 days)", retention)
			}
			if batch <= 0 {
				return usagef("--batch %d: use a positive number of records, e.g. 1000", batch)
			}
			if schemas != "" {
				tables, done, err := across(cmd, schemas)
				if err != nil {
					return err
				}
				defer done()
				return purgeEach(cmd, tables, schemas, retention, batch)
			}
			t, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			_, err = purgeInbox(cmd, t, retention, batch)
			return err
		},
	}
	cmd.Flags().StringVar(&schemas, "schemas", "", "PostgreSQL: purge the inbox table (--inbox-table) of every schema this pattern matches, where * matches any characters (e.g. 'tenant_*'), instead of --schema's")
	cmd.Flags().DurationVar(&retention, "retention", outbox.InboxRetentionDefault, "keep records whose effects were complete less than this long ago")
	cmd.Flags().IntVar(&batch, "batch", outbox.InboxPurgeBatchSizeDefault, "records deleted per statement")
	return cmd
}
