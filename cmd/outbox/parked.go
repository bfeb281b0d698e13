package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

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
			fmt.Fprintln(tw, "ID\tCONSUMER\tTOPIC\tKEY\tATTEMPTS\tPARKED\tRETRY\tKEY ORDER\tERROR")
			for _, p := range parked {
				retry := ""
				switch {
				case !p.TakenAt.IsZero():
					retry = "taken " + p.TakenAt.UTC().Format("2006-01-02T15:04:05Z")
				case p.RetryRequested:
					retry = "requested"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, p.Consumer, p.Topic, p.Key, p.Attempts,
					p.ParkedAt.UTC().Format("2006-01-02T15:04:05Z"), retry, keyOrder(p), oneLine(p.Error, 80))
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

// keyOrder says where p stands in its key's order: waiting behind another
// parked message, next in line (taken by a consumer process, its retry
// requested, or stalled: neither, so nothing applies it), or overtaken by
// later messages of its key.
func keyOrder(p outbox.ParkedMessage) string {
	switch {
	case p.Waiting && p.Behind != uuid.Nil:
		return "waiting behind " + p.Behind.String()
	case p.Waiting && !p.TakenAt.IsZero():
		return "next of its key, taken"
	case p.Waiting && p.RetryRequested:
		return "next of its key, retry requested"
	case p.Waiting:
		return "next of its key, stalled: outbox inbox parked retry --consumer " + p.Consumer + " " + p.ID.String()
	case p.Overtaken > 0:
		return fmt.Sprintf("overtaken by %d", p.Overtaken)
	}
	return ""
}

// showParked is p as `parked show` and `parked list --json` print it; the
// payload only with withPayload.
func showParked(p outbox.ParkedMessage, withPayload bool) map[string]any {
	out := map[string]any{
		"id": p.ID, "consumer": p.Consumer, "topic": p.Topic, "key": p.Key, "headers": p.Headers,
		"attempts": p.Attempts, "error": p.Error, "parked_at": p.ParkedAt, "retry_requested": p.RetryRequested,
		"waiting": p.Waiting, "overtaken": p.Overtaken,
	}
	if p.Behind != uuid.Nil {
		out["behind"] = p.Behind
	}
	if !p.TakenAt.IsZero() {
		out["taken_at"] = p.TakenAt
	}
	if p.Waiting && p.Behind == uuid.Nil && !p.RetryRequested && p.TakenAt.IsZero() {
		out["stalled"] = true
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
// parked messages without --consumer and without ids (--all, or
// --taken-older-than), which only --consumer can name.
func needConsumer(cmd *cobra.Command, consumer string, byID bool) error {
	if consumer == "" && !byID {
		return usagef("%s: --consumer is required without message ids: name the consumer that parked the messages (the CONSUMER column of `outbox inbox parked list`)", cmd.CommandPath())
	}
	return nil
}

// consumerOf returns consumer or, when it is empty, the one consumer that
// parked every message of ids, found as `parked show` finds it: --consumer
// is needed only when several consumers parked one of them, or parked
// them.
func consumerOf(ctx context.Context, t inboxTable, consumer string, ids []uuid.UUID) (string, error) {
	if consumer != "" {
		return consumer, nil
	}
	for _, id := range ids {
		p, err := t.GetParked(ctx, "", id)
		if errors.Is(err, outbox.ErrNotFound) {
			return "", fmt.Errorf("%w; check the id with `outbox inbox parked list`", err)
		}
		if err != nil {
			return "", fmt.Errorf("%w (name the consumer with --consumer)", err)
		}
		if consumer != "" && p.Consumer != consumer {
			return "", usagef("the messages were parked by several consumers (%s, %s): give each consumer's ids with its --consumer", consumer, p.Consumer)
		}
		consumer = p.Consumer
	}
	return consumer, nil
}

func newParkedRetryCommand(open openInbox) *cobra.Command {
	var (
		consumer          string
		all, force, taken bool
		takenOlder        time.Duration
	)
	cmd := &cobra.Command{
		Use:   "retry [--consumer C] (ID... | --all | --taken-older-than D) [--force] [--taken]",
		Short: "Ask the running consumer to handle parked messages again",
		Long: `retry marks parked messages of --consumer for a retry. A running process of that consumer (with
Parked set in its config) takes them, one at a time, within a second and hands them to its handler
again, with a new round of attempts: a success removes them from the parked messages, and the
messages of the same key that waited behind them are then applied in the order they arrived; a new
failure parks them again with the new error. Nothing happens until a process of the consumer runs.

A message waiting behind another of its key cannot be retried by itself: retry (or discard) the
one it waits behind. A message whose key moved on (a consumer set to SkipParkedInKeyOrder applied
later messages of its key after it was parked) would be applied after them: retry refuses it,
saying how many, unless --force is given.

A message a consumer process took for a retry (RETRY "taken" in parked list) is in its handler
until that ends: retry refuses it by id, and --all leaves it alone. A process that stops hands
back what it took; one that was killed leaves it taken. Then take it back and retry it by id with
--taken, or every message of the consumer taken longer ago than D with --taken-older-than D
(` + "`outbox inbox status`" + ` flags them). If the process that took it in fact still runs, the message
is handled twice.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needConsumer(cmd, consumer, len(args) > 0 && !all); err != nil {
				return err
			}
			var ids []uuid.UUID
			if cmd.Flags().Changed("taken-older-than") {
				if all || len(args) > 0 {
					return usagef("give message ids, --all or --taken-older-than, not two of them")
				}
			} else {
				if all && taken {
					return usagef("--taken takes back the messages given by id; with --all, use --taken-older-than D to take back every message taken longer ago than D")
				}
				var err error
				if ids, err = idsOrAll(args, all); err != nil {
					return err
				}
			}
			t, done, err := open(cmd)
			if err != nil {
				return err
			}
			defer done()
			if consumer, err = consumerOf(cmd.Context(), t, consumer, ids); err != nil {
				return err
			}
			if cmd.Flags().Changed("taken-older-than") {
				if ids, err = takenBefore(cmd.Context(), t, consumer, time.Now().Add(-takenOlder)); err != nil {
					return err
				}
				if len(ids) == 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "0 parked message(s) of %s taken over %s ago; none taken back\n", consumer, takenOlder)
					return nil
				}
				taken = true
			}
			if err := retryKeepsKeyOrder(cmd.Context(), t, consumer, ids, force, taken); err != nil {
				return err
			}
			if err := forgetTaken(cmd.Context(), t, consumer, ids, taken); err != nil {
				return err
			}
			n, err := t.RequestRetry(cmd.Context(), consumer, ids...)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%d parked message(s) of %s marked for a retry; the running consumer takes them within a second\n", n, consumer)
			if len(ids) == 0 {
				taken, err := t.TakenCounts(cmd.Context())
				if err != nil {
					return err
				}
				if taken[consumer] > 0 {
					fmt.Fprintf(out, "%d taken by a consumer process left alone: each is in a handler, and is unparked or parked again when it ends; "+
						"if its process was killed, take it back with `outbox inbox parked retry --consumer %s --taken ID`\n", taken[consumer], consumer)
				}
			}
			return missingParked(len(ids), n, consumer)
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer whose parked messages to retry (needed with --all or --taken-older-than, or when several consumers parked a message)")
	cmd.Flags().BoolVar(&all, "all", false, "retry every parked message of the consumer (those waiting behind another follow it)")
	cmd.Flags().BoolVar(&force, "force", false, "retry messages that later messages of their key overtook, applying them after those")
	cmd.Flags().BoolVar(&taken, "taken", false, "take the messages (by id) back from the consumer process that took them, and retry them; "+
		"if that process still runs, the message is handled twice")
	cmd.Flags().DurationVar(&takenOlder, "taken-older-than", 0, "take back and retry every message of the consumer taken longer ago than this, "+
		"as --taken does (likely left by a killed process); make it longer than a retry can take: MaxDeliver attempts, the backoff between them and the handler's time")
	return cmd
}

// retryKeepsKeyOrder refuses a retry of consumer's parked messages ids (all
// when empty) that would break their key's order: a message waiting behind
// another, without taken one a consumer process took, or without force one
// that later messages of its key overtook.
func retryKeepsKeyOrder(ctx context.Context, t inboxTable, consumer string, ids []uuid.UUID, force, taken bool) error {
	var parked []outbox.ParkedMessage
	if len(ids) == 0 {
		if err := eachParked(ctx, t, consumer, func(p outbox.ParkedMessage) { parked = append(parked, p) }); err != nil {
			return err
		}
	}
	for _, id := range ids {
		p, err := t.GetParked(ctx, consumer, id)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // counted as missing once the others are marked
		}
		if err != nil {
			return err
		}
		if p.Waiting && p.Behind != uuid.Nil {
			return fmt.Errorf("message %s waits behind parked message %s of its key %q, and follows it once that one is retried with success or discarded: retry or discard %s instead",
				p.ID, p.Behind, p.Key, p.Behind)
		}
		if !taken {
			if err := notTaken(p, "retry"); err != nil {
				return err
			}
		}
		parked = append(parked, p)
	}
	if force {
		return nil
	}
	var overtaken []string
	for _, p := range parked {
		if p.Overtaken > 0 {
			overtaken = append(overtaken, fmt.Sprintf("%s of key %q: %d later message(s) of its key were applied after it was parked", p.ID, p.Key, p.Overtaken))
		}
	}
	if len(overtaken) > 0 {
		return fmt.Errorf("retrying would apply parked messages after later messages of their key (the consumer skips parked messages in key order): %s; "+
			"if applying them late is right, retry again with --force, else discard them", strings.Join(overtaken, "; "))
	}
	return nil
}

func newParkedDiscardCommand(open openInbox) *cobra.Command {
	var (
		consumer string
		taken    bool
	)
	cmd := &cobra.Command{
		Use:   "discard [--consumer C] ID... [--taken]",
		Short: "Delete parked messages for good",
		Long: `discard deletes parked messages of --consumer. A discarded message that was first of its key
lets the key go on: the message waiting behind it is retried by the running consumer.

A message a consumer process took for a retry (RETRY "taken" in parked list) is in its handler:
discard refuses it, since its key would go on while it is being applied. If the process stopped
before it ended (a killed process leaves the message taken), take it back and discard it with
--taken; if the process is in fact still running, the message may be applied after later messages
of its key.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := needConsumer(cmd, consumer, true); err != nil {
				return err
			}
			ids, err := idsOrAll(args, false)
			if err != nil {
				return err
			}
			discard := func(t inboxTable, ctx context.Context, consumer string, ids ...uuid.UUID) (int, error) {
				if !taken {
					for _, id := range ids {
						p, err := t.GetParked(ctx, consumer, id)
						if errors.Is(err, outbox.ErrNotFound) {
							continue // counted as missing once the others are discarded
						}
						if err != nil {
							return 0, err
						}
						if err := notTaken(p, "discard"); err != nil {
							return 0, err
						}
					}
				}
				if err := forgetTaken(ctx, t, consumer, ids, taken); err != nil {
					return 0, err
				}
				return t.DiscardParked(ctx, consumer, ids...)
			}
			return changeParked(cmd, open, consumer, ids, discard, "discarded")
		},
	}
	cmd.Flags().StringVar(&consumer, "consumer", "", "the consumer whose parked messages to discard (needed when several consumers parked a message)")
	cmd.Flags().BoolVar(&taken, "taken", false, "take the messages back from the consumer process that took them, and discard them; "+
		"if that process still runs, the message may be applied after later messages of its key")
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
	if consumer, err = consumerOf(cmd.Context(), t, consumer, ids); err != nil {
		return err
	}
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

// waitingCounts counts each consumer's parked messages that wait behind
// another of their key, if the table keeps key order (none otherwise).
func waitingCounts(ctx context.Context, t inboxTable) (map[string]int64, error) {
	w, ok := t.(interface {
		WaitingCounts(ctx context.Context) (map[string]int64, error)
	})
	if !ok {
		return map[string]int64{}, nil
	}
	return w.WaitingCounts(ctx)
}
