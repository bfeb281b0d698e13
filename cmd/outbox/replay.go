package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox/outboxdriver"
)

// replayLimitDefault is how many messages one `outbox replay` replays.
const replayLimitDefault = 10000

func newReplayCommand(g *globalFlags) *cobra.Command {
	var (
		choice replayChoice
		limit  int
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "replay [ID...] [--topic T] [--key K] [--since TIME] [--until TIME] [--all] [--dry-run] [--limit N]",
		Short: "Publish again messages already published (kept by --retention), keeping their ids",
		Long: `replay makes published messages, which relays keep while their --retention lasts, pending again:
the relays publish them again with the same ids, so consumers with an inbox skip those they had
applied. Use it for a consumer that lost messages (its database restored from a backup, a bug that
dropped them). It chooses messages by id, --topic, --key and write time (--since, --until: an RFC
3339 time, or a duration meaning that long ago, e.g. 2h), all of which must match; --all replays
every kept message. Messages whose expiry passed are left out (replayed, they would only be
dead-lettered as expired). Run it first with --dry-run, which counts the messages and changes
nothing. A replay of more than --limit messages (10,000) is refused: narrow the choice, or raise
the limit on purpose. In key order a key's replayed messages go out before its newer pending
ones. Running the same replay again sends the messages again.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit <= 0 {
				return usagef("--limit %d: use a positive count", limit)
			}
			choice.ids = args
			f, err := choice.filter(time.Now())
			if err != nil {
				return err
			}
			b, err := g.openReady(cmd.Context(), storeMode{notify: true})
			if err != nil {
				return err
			}
			defer b.close()
			replayer, ok := b.admin.(outboxdriver.Replayer)
			if !ok {
				return fmt.Errorf("this store cannot replay messages")
			}
			matching, err := replayer.Replay(cmd.Context(), f, limit, true)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case matching == 0:
				fmt.Fprintln(out, "0 published messages match: only messages published while relays ran with --retention are kept, until it ends (and those whose expiry passed are left out)")
				return nil
			case matching > limit && dryRun:
				fmt.Fprintf(out, "%d published message(s) match, more than --limit %d: a replay of them would be refused; narrow the choice or raise --limit\n", matching, limit)
				return nil
			case matching > limit:
				return fmt.Errorf("%d published messages match, more than --limit %d: narrow the choice (--topic, --key, --since, --until) or raise --limit", matching, limit)
			case dryRun:
				fmt.Fprintf(out, "%d published message(s) match; without --dry-run, replay publishes them again\n", matching)
				return nil
			}
			n, err := replayer.Replay(cmd.Context(), f, limit, false)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%d message(s) pending again, with their ids (consumers with an inbox skip those they applied)\n", n)
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&choice.topic, "topic", "", "replay messages of this topic")
	fl.StringVar(&choice.key, "key", "", "replay messages of this key")
	fl.StringVar(&choice.since, "since", "", "replay messages written at or after this time (RFC 3339, or a duration ago such as 2h)")
	fl.StringVar(&choice.until, "until", "", "replay messages written before this time (RFC 3339, or a duration ago)")
	fl.BoolVar(&choice.all, "all", false, "replay every kept published message")
	fl.BoolVar(&dryRun, "dry-run", false, "count the messages that match and change nothing")
	fl.IntVar(&limit, "limit", replayLimitDefault, "refuse to replay more messages than this")
	return cmd
}

// replayChoice is how `outbox replay` and the console's Replay page choose
// the messages to replay, as given: ids, topic, key, since, until (RFC 3339
// times or durations ago), or all.
type replayChoice struct {
	ids                      []string
	key, since, topic, until string
	all                      bool
	// timesFixed says since and until are the window a count fixed (the
	// console's confirmation), not a choice: with all, they only bound it.
	timesFixed bool
}

// filter checks the choice and returns its filter, the times said as ago
// counted from now. Errors name the flag and the fix.
func (c replayChoice) filter(now time.Time) (outboxdriver.ReplayFilter, error) {
	f := outboxdriver.ReplayFilter{Topic: c.topic, Key: c.key}
	for _, a := range c.ids {
		id, err := parseID(a)
		if err != nil {
			return f, err
		}
		f.IDs = append(f.IDs, id)
	}
	var err error
	if f.WrittenFrom, err = timeOrAgo("--since", c.since, now); err != nil {
		return f, err
	}
	if f.WrittenBefore, err = timeOrAgo("--until", c.until, now); err != nil {
		return f, err
	}
	chosen := len(f.IDs) > 0 || f.Topic != "" || f.Key != "" || (!c.timesFixed && (c.since != "" || c.until != ""))
	switch {
	case !chosen && !c.all:
		return f, usagef("choose the messages to replay (ids, --topic, --key, --since, --until), or give --all for every kept message")
	case chosen && c.all:
		return f, usagef("give --all or a choice of messages, not both")
	}
	return f, nil
}

// timeOrAgo parses a flag's value as an RFC 3339 time or as a duration
// before now; "" is the zero time.
func timeOrAgo(flag, v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("%s %q: give an RFC 3339 time (2026-11-27T10:00:00Z) or a duration ago (90m)", flag, v)
}
