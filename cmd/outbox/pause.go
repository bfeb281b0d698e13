package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox/outboxdriver"
)

func newPauseCommand(g *globalFlags) *cobra.Command {
	var topic, reason string
	cmd := &cobra.Command{
		Use:   "pause --topic T [--reason TEXT]",
		Short: "Stop publishing a topic's messages until it is resumed; the other topics flow on",
		Long: `pause stops the relays publishing the messages of a topic: they stay pending, listed as paused
by ` + "`outbox paused`" + ` and ` + "`outbox status`" + `, until ` + "`outbox resume`" + `. The topic's pending messages are moved out of
the relays' reach at once (their due time moves forward by about 250 years, so their schedule
comes back with them); a message of the topic written later is moved the same way by the relay
that meets it, which reads the paused topics every --pause-check-interval (1s) and checks each batch
against them before publishing it: a relay may still publish such a message within that second, and
a batch checked before the pause goes on to its end. Messages being published when the pause came
finish.
In key order, the messages of a key behind a paused message wait with it, whatever their topic.
Relays of releases before pausing existed leave the paused messages alone, but publish what is
written after the pause.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return usagef("--topic: name the topic to pause")
			}
			return withPauser(cmd.Context(), g, func(p outboxdriver.TopicPauser) error {
				n, err := p.PauseTopic(cmd.Context(), topic, operator(), reason)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "topic %q paused: %d pending message(s) held; `outbox resume --topic %s` publishes them again\n", topic, n, topic)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "the topic to pause")
	cmd.Flags().StringVar(&reason, "reason", "", "why, for whoever reads `outbox paused`")
	return cmd
}

func newResumeCommand(g *globalFlags) *cobra.Command {
	var topic string
	cmd := &cobra.Command{
		Use:   "resume --topic T",
		Short: "Publish a paused topic's messages again, where it stopped",
		Long: `resume ends a topic's pause: its messages, and the messages of other topics that waited behind
them in their keys, are due again with their schedule, in their order. Resuming a topic that is not
paused moves back any of its messages still held (` + "`outbox paused`" + ` lists them as resumed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if topic == "" {
				return usagef("--topic: name the topic to resume")
			}
			return withPauser(cmd.Context(), g, func(p outboxdriver.TopicPauser) error {
				n, err := p.ResumeTopic(cmd.Context(), topic)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "topic %q resumed: %d message(s) due again\n", topic, n)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&topic, "topic", "", "the topic to resume")
	return cmd
}

func newPausedCommand(g *globalFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "paused",
		Short: "List the paused topics, with who paused them, when, why and how many messages wait",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withPauser(cmd.Context(), g, func(p outboxdriver.TopicPauser) error {
				list, err := p.PausedTopics(cmd.Context())
				if err != nil {
					return err
				}
				if len(list) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), "no topic is paused")
					return nil
				}
				printPaused(cmd.OutOrStdout(), list, time.Now())
				return nil
			})
		},
	}
}

// printPaused prints one line per paused topic.
func printPaused(w io.Writer, list []outboxdriver.PausedTopic, now time.Time) {
	for _, p := range list {
		if p.Resumed {
			fmt.Fprintf(w, "  %s: not paused, %d message(s) still held: those behind a paused message of their key go when it is resumed; `outbox resume --topic %s` moves back any others (left by a relay)\n",
				p.Topic, p.Messages, p.Topic)
			continue
		}
		why := ""
		if p.Reason != "" {
			why = fmt.Sprintf(": %q", p.Reason)
		}
		fmt.Fprintf(w, "  %s: paused %s ago by %s%s, %d message(s) waiting\n", p.Topic, now.Sub(p.At).Round(time.Second), p.By, why, p.Messages)
	}
}

// withPauser opens the table's store and runs fn with it as a TopicPauser.
func withPauser(ctx context.Context, g *globalFlags, fn func(outboxdriver.TopicPauser) error) error {
	b, err := g.openReady(ctx, storeMode{notify: true})
	if err != nil {
		return err
	}
	defer b.close()
	p, ok := b.admin.(outboxdriver.TopicPauser)
	if !ok {
		return fmt.Errorf("this store cannot pause topics")
	}
	return fn(p)
}

// operator names who runs the command, for the paused topics' list:
// user@host.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return cmp.Or(name, "unknown") + "@" + cmp.Or(host, "unknown")
}

// readPaused lists the table's paused topics for `outbox status`: none when
// the store cannot pause topics or its table has no paused topics yet.
func readPaused(ctx context.Context, admin outboxdriver.Admin) []outboxdriver.PausedTopic {
	p, ok := admin.(outboxdriver.TopicPauser)
	if !ok {
		return nil
	}
	list, err := p.PausedTopics(ctx)
	if err != nil {
		return nil
	}
	return list
}
