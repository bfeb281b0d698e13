package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func newDeadCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead",
		Short: "List, inspect, retry or discard dead-lettered messages",
	}
	cmd.AddCommand(newDeadListCommand(g), newDeadShowCommand(g), newDeadGroupsCommand(g), newDeadRetryCommand(g), newDeadDiscardCommand(g))
	return cmd
}

func newDeadListCommand(g *globalFlags) *cobra.Command {
	var (
		limit int
		after string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead messages in id order",
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
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			msgs, err := b.admin.ListDead(cmd.Context(), afterID, limit)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPTS\tCREATED\tKEY ORDER\tLAST ERROR")
			for _, m := range msgs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", m.ID, m.Topic, m.Key, m.Attempts, m.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"),
					deadKeyOrder(m), oneLine(m.LastError, 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(msgs) == limit {
				fmt.Fprintf(cmd.ErrOrStderr(), "more may follow: outbox dead list --after %s\n", msgs[len(msgs)-1].ID)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 100, "most messages to list")
	cmd.Flags().StringVar(&after, "after", "", "list messages after this id (paging)")
	return cmd
}

func newDeadShowCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Print one message, payload and history of failed attempts included, as JSON",
		Args:  exactArgs(1, "give one message id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseID(args[0])
			if err != nil {
				return err
			}
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			m, err := b.admin.Get(cmd.Context(), id)
			if err != nil {
				return err
			}
			shown := showMessage(m)
			if rec, ok := b.admin.(outboxdriver.AttemptRecorder); ok {
				history, err := rec.Attempts(cmd.Context(), id)
				if err != nil {
					shown["history_error"] = err.Error()
				} else {
					shown["history"] = attemptsJSON(history)
				}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(shown)
		},
	}
}

// deadKeyOrder says where dead message m stands in its key's order: passed
// by later messages of its key (a relay that skips dead messages in key
// order), or nothing to say.
func deadKeyOrder(m outbox.Message) string {
	if m.Overtaken > 0 {
		return fmt.Sprintf("overtaken by %d", m.Overtaken)
	}
	return ""
}

func showMessage(m outbox.Message) map[string]any {
	out := map[string]any{
		"id": m.ID, "topic": m.Topic, "key": m.Key, "headers": m.Headers, "status": m.Status,
		"attempts": m.Attempts, "last_error": m.LastError, "created_at": m.CreatedAt, "available_at": m.AvailableAt,
		"overtaken": m.Overtaken,
	}
	if json.Valid(m.Payload) {
		out["payload"] = json.RawMessage(m.Payload)
	} else {
		out["payload_base64"] = m.Payload
	}
	if !m.PublishedAt.IsZero() {
		out["published_at"] = m.PublishedAt
	}
	return out
}

func newDeadRetryCommand(g *globalFlags) *cobra.Command {
	var (
		all, force bool
		group      string
	)
	cmd := &cobra.Command{
		Use:   "retry (ID... | --all | --group G) [--force]",
		Short: "Make dead messages pending again, with their attempts reset",
		Long: `retry makes dead messages pending again, with their attempts reset: the relay publishes them
as soon as it claims them. In key order a dead message holds the rest of its key, which goes on
in order once it is retried. A message whose key moved on (a relay set to skip dead messages in
key order, --skip-dead-in-key-order, published later messages of its key after it died) would be
published after them: retry refuses it, saying how many, unless --force is given. --group retries
every member of a group of ` + "`outbox dead groups`" + `.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := idsOrAll(args, all || group != "")
			if err != nil || (all && group != "") {
				return cmp.Or(err, usagef("give --all or --group, not both"))
			}
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			if group != "" {
				if ids, err = deadGroupIDs(cmd.Context(), b.admin, group); err != nil {
					return err
				}
			}
			retry := retryDeadKeepingKeyOrder
			if force {
				retry = retryDeadAnyway
			}
			n, err := retry(cmd.Context(), b.admin, ids, all)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d message(s) pending again\n", n)
			return missing(len(ids), n, "dead")
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "retry every dead message")
	cmd.Flags().StringVar(&group, "group", "", "retry every message of this group of `outbox dead groups`")
	cmd.Flags().BoolVar(&force, "force", false, "retry messages that later messages of their key overtook, publishing them after those")
	return cmd
}

// retryDeadAnyway retries the dead messages ids (every one if all),
// whatever overtook them (--force).
func retryDeadAnyway(ctx context.Context, admin outboxdriver.Admin, ids []uuid.UUID, all bool) (int, error) {
	if all {
		return admin.RetryAllDead(ctx)
	}
	return admin.RetryDead(ctx, ids...)
}

// retryDeadKeepingKeyOrder retries the dead messages ids (every one if
// all) unless later messages of their key overtook one of them: then it
// retries none and says which. A store that can (outboxdriver.KeyOrderRetrier)
// looks at the counts in the step that retries, so a relay cannot overtake
// a message between the two; with another, the look comes first
// (deadRetryKeepsKeyOrder).
func retryDeadKeepingKeyOrder(ctx context.Context, admin outboxdriver.Admin, ids []uuid.UUID, all bool) (int, error) {
	if r, ok := admin.(outboxdriver.KeyOrderRetrier); ok {
		n, overtaken, err := r.RetryDeadUnlessOvertaken(ctx, ids, all)
		if err != nil {
			return 0, err
		}
		if err := refuseOvertaken(overtaken); err != nil {
			return 0, err
		}
		return n, nil
	}
	if err := deadRetryKeepsKeyOrder(ctx, admin, ids); err != nil {
		return 0, err
	}
	return retryDeadAnyway(ctx, admin, ids, all)
}

// deadRetryKeepsKeyOrder refuses a retry of the dead messages ids (all
// when empty) that later messages of their key overtook: retried, they
// would be published after those.
func deadRetryKeepsKeyOrder(ctx context.Context, admin outboxdriver.Admin, ids []uuid.UUID) error {
	var dead []outbox.Message
	if len(ids) == 0 {
		err := eachListed(func(after uuid.UUID, limit int) ([]outbox.Message, error) { return admin.ListDead(ctx, after, limit) },
			func(m outbox.Message) uuid.UUID { return m.ID }, func(m outbox.Message) { dead = append(dead, m) })
		if err != nil {
			return err
		}
	}
	for _, id := range ids {
		m, err := admin.Get(ctx, id)
		if errors.Is(err, outbox.ErrNotFound) {
			continue // counted as missing once the others are retried
		}
		if err != nil {
			return err
		}
		if m.Status == outbox.StatusDead {
			dead = append(dead, m)
		}
	}
	return refuseOvertaken(dead)
}

// refuseOvertaken refuses a retry of dead messages if later messages of
// the key of any of them overtook it, naming those, and returns nil if
// none is.
func refuseOvertaken(dead []outbox.Message) error {
	var overtaken []string
	for _, m := range dead {
		if m.Overtaken > 0 {
			overtaken = append(overtaken, fmt.Sprintf("%s of key %q: %d later message(s) of its key were published after it died", m.ID, m.Key, m.Overtaken))
		}
	}
	if len(overtaken) > 0 {
		return fmt.Errorf("retrying would publish dead messages after later messages of their key (a relay skips dead messages in key order): %s; "+
			"if publishing them late is right, retry again with --force, else discard them", strings.Join(overtaken, "; "))
	}
	return nil
}

func newDeadDiscardCommand(g *globalFlags) *cobra.Command {
	var group, claimCheckURL string
	cmd := &cobra.Command{
		Use:   "discard (ID... | --group G)",
		Short: "Delete dead messages for good",
		RunE: func(cmd *cobra.Command, args []string) error {
			ids, err := idsOrAll(args, group != "")
			if err != nil {
				return err
			}
			cc, err := openClaimCheck(cmd.Context(), claimCheckURL, false)
			if err != nil {
				return err
			}
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			if group != "" {
				if ids, err = deadGroupIDs(cmd.Context(), b.admin, group); err != nil {
					return err
				}
			}
			n, err := cc.discardDead(cmd.Context(), b.admin, ids...)
			if err != nil && n == 0 {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d message(s) discarded\n", n)
			if err != nil {
				return err // the blobs that stay
			}
			return missing(len(ids), n, "dead")
		},
	}
	cmd.Flags().StringVar(&group, "group", "", "discard every message of this group of `outbox dead groups`")
	cmd.Flags().StringVar(&claimCheckURL, "claim-check", "", claimCheckFlagUsage+"; the discarded messages' blobs are deleted")
	return cmd
}

func idsOrAll(args []string, all bool) ([]uuid.UUID, error) {
	switch {
	case all && len(args) > 0:
		return nil, usagef("give message ids or --all, not both")
	case !all && len(args) == 0:
		return nil, usagef("give one or more message ids, or --all")
	}
	ids := make([]uuid.UUID, 0, len(args))
	for _, a := range args {
		id, err := parseID(a)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// missing reports ids that matched no message in the needed state.
func missing(asked, changed int, state string) error {
	if asked > 0 && changed < asked {
		return fmt.Errorf("%d of %d id(s) matched no %s message; check them with `outbox dead list`", asked-changed, asked, state)
	}
	return nil
}

func parseID(s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, usagef("%q is not a message id (a UUID such as 0190f1e2-7c3a-7d40-8a1b-2c3d4e5f6a7b)", s)
	}
	return id, nil
}

func exactArgs(n int, hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s: %s", cmd.CommandPath(), hint)
		}
		return nil
	}
}

func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > max {
		return s[:max-3] + "..."
	}
	return s
}
