package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
)

// newInboxParkedCommand is `outbox inbox parked`: the messages consumers
// parked in the table beside the inbox table (outbox.ParkStore), whatever
// the broker they came from.
func newInboxParkedCommand(open openInbox) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List, inspect, retry or discard the messages consumers parked in their database",
		Long: `parked works on the messages consumers gave up on after their attempts ran out (or on an
outbox.Permanent error), kept beside the inbox table when the consumer adapter's config sets
Parked (outboxamqp, outboxnats, outboxkafka). A retry is done by the running consumer: retry
marks the messages, and a process of that consumer takes them within a second and hands them to
its handler again; a success removes them, a new failure parks them again with the new error.`,
	}
	cmd.AddCommand(newParkedListCommand(open), newParkedShowCommand(open), newParkedRetryCommand(open), newParkedDiscardCommand(open))
	return cmd
}

func newParkedListCommand(open openInbox) *cobra.Command {
	var (
		consumer, after string
		limit           int
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List parked messages in id order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return usagef("--limit %d: use a positive number", limit)
			}
			afterID := uuid.Nil
			if after != "" {
				id, err := parseID(after)
				if err != nil {
					return err
				}
				afterID = id
			}
			t, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			parked, err := t.ListParked(cmd.Context(), consumer, afterID, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				rows := make([]map[string]any, len(parked))
				for i, p := range parked {
					rows[i] = showParked(p, false)
				}
				return json.NewEncoder(out).Encode(map[string]any{"table": t.ParkedName(), "parked": rows})
			}
			if len(parked) == 0 {
				fmt.Fprintf(out, "no parked messages in %s\n", t.ParkedName())
				return nil
			}
			tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCONSUMER\tTOPIC\tKEY\tATTEMPTS\tPARKED\tRETRY\tERROR")
			for _, p := range parked {
				retry := ""
				if p.RetryRequested {
					retry = "requested"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", p.ID, p.Consumer, p.Topic, p.Key, p.Attempts,
					p.ParkedAt.UTC().Format("2006-01-02T15:04:05Z"), retry, oneLine(p.Error, 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(parked) == limit {
				fmt.Fprintf(cmd.ErrOrStderr(), "more may follow: outbox inbox parked list --after %s\n", parked[len(parked)-1].ID)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "list only this consumer's parked messages (default: every consumer's)")
	cmd.Flags().IntVar(&limit, "limit", 100, "most messages to list")
	cmd.Flags().StringVar(&after, "after", "", "list messages after this id (paging)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// showParked is p as `parked show` and `parked list --json` print it; the
// payload only with withPayload.
func showParked(p outbox.ParkedMessage, withPayload bool) map[string]any {
	out := map[string]any{
		"id": p.ID, "consumer": p.Consumer, "topic": p.Topic, "key": p.Key, "headers": p.Headers,
		"attempts": p.Attempts, "error": p.Error, "parked_at": p.ParkedAt, "retry_requested": p.RetryRequested,
	}
	if !p.CreatedAt.IsZero() {
		out["created_at"] = p.CreatedAt
	}
	if withPayload {
		if json.Valid(p.Payload) {
			out["payload"] = json.RawMessage(p.Payload)
		} else {
			out["payload_base64"] = p.Payload
		}
	}
	return out
}

func newParkedShowCommand(open openInbox) *cobra.Command {
	var consumer string
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print one parked message, payload included, as JSON",
		Args:  exactArgs(1, "give one message id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			t, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			p, err := t.GetParked(cmd.Context(), consumer, id)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(showParked(p, true))
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer that parked it (needed when several did)")
	return cmd
}

// needConsumer is the usage error of a command that changes one consumer's
// parked messages without --consumer.
func needConsumer(cmd *cobra.Command, consumer string) error {
	if consumer == "" {
		return usagef("%s: --consumer is required: name the consumer that parked the messages (the CONSUMER column of `outbox inbox parked list`)", cmd.CommandPath())
	}
	return nil
}

func newParkedRetryCommand(open openInbox) *cobra.Command {
	var (
		consumer string
		all      bool
	)
	cmd := &cobra.Command{
		Use:   "retry --consumer C (ID... | --all)",
		Short: "Ask the running consumer to handle parked messages again",
		Long: `retry marks parked messages of --consumer for a retry. A running process of that consumer (with
Parked set in its config) takes them within a second and hands them to its handler again, with a
new round of attempts: a success removes them from the parked messages, a new failure parks them
again with the new error. Nothing happens until a process of the consumer runs.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needConsumer(cmd, consumer); err != nil {
				return err
			}
			ids, err := idsOrAll(args, all)
			if err != nil {
				return err
			}
			return changeParked(cmd, open, consumer, ids, inboxTable.RequestRetry, "marked for a retry; the running consumer takes them within a second")
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer whose parked messages to retry (required)")
	cmd.Flags().BoolVar(&all, "all", false, "retry every parked message of the consumer")
	return cmd
}

func newParkedDiscardCommand(open openInbox) *cobra.Command {
	var consumer string
	cmd := &cobra.Command{
		Use:   "discard --consumer C ID...",
		Short: "Delete parked messages for good",
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needConsumer(cmd, consumer); err != nil {
				return err
			}
			ids, err := idsOrAll(args, false)
			if err != nil {
				return err
			}
			return changeParked(cmd, open, consumer, ids, inboxTable.DiscardParked, "discarded")
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer whose parked messages to discard (required)")
	return cmd
}

// changeParked applies change (RequestRetry, DiscardParked) to the parked
// messages ids of consumer, or to all of them when ids is empty, says what
// it did, and fails for ids that matched nothing.
func changeParked(cmd *cobra.Command, open openInbox, consumer string, ids []uuid.UUID,
	change func(t inboxTable, ctx context.Context, consumer string, ids ...uuid.UUID) (int, error), did string,
) error {
	t, done, err := open(cmd)
	if err != nil {
		return err
	}
	defer done()
	n, err := change(t, cmd.Context(), consumer, ids...)
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%d parked message(s) of %s %s\n", n, consumer, did)
	return missingParked(len(ids), n, consumer)
}

// missingParked reports ids that matched no parked message of consumer.
func missingParked(asked, changed int, consumer string) error {
	if asked > 0 && changed < asked {
		return fmt.Errorf("%d of %d id(s) matched no message parked by %s; check them with `outbox inbox parked list --consumer %s`", asked-changed, asked, consumer, consumer)
	}
	return nil
}
