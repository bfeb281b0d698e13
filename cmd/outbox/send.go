package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
)

func newSendCommand(g *globalFlags) *cobra.Command {
	var (
		m           outbox.Message
		headers     []string
		payload     string
		payloadFile string
		expiresIn   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "send --topic T [--key K] [--header k=v]... [--expires-in D] (--payload TEXT | --payload-file F)",
		Short: "Write one message by hand (smoke tests, replays)",
		Long: `send writes one message in its own transaction and prints its id. It also
NOTIFYs, so relays in other processes wake at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case cmd.Flags().Changed("payload") && payloadFile != "":
				return usagef("give --payload or --payload-file, not both")
			case payloadFile == "-":
				b, err := io.ReadAll(os.Stdin)
				if err != nil {
					return fmt.Errorf("read payload from stdin: %w", err)
				}
				m.Payload = b
			case payloadFile != "":
				b, err := os.ReadFile(payloadFile)
				if err != nil {
					return fmt.Errorf("read --payload-file: %w", err)
				}
				m.Payload = b
			case cmd.Flags().Changed("payload"):
				m.Payload = []byte(payload)
			default:
				return usagef("give the message body with --payload TEXT or --payload-file FILE (- for stdin)")
			}
			if len(headers) > 0 {
				m.Headers = map[string]string{}
			}
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok {
					return usagef("--header %q: write it as name=value", h)
				}
				m.Headers[k] = v
			}
			if expiresIn < 0 {
				return usagef("--expires-in %s: use a positive duration (0: never expires)", expiresIn)
			}
			if expiresIn > 0 {
				m.ExpiresAt = time.Now().Add(expiresIn)
			}
			b, err := g.openReady(cmd.Context(), storeMode{notify: true})
			if err != nil {
				return err
			}
			defer b.close()
			if err := b.send(cmd.Context(), &m); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), m.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&m.Topic, "topic", "", "message topic (required)")
	f.StringVar(&m.Key, "key", "", "ordering key")
	f.StringArrayVar(&headers, "header", nil, "header name=value (repeatable)")
	f.StringVar(&payload, "payload", "", "message body")
	f.StringVar(&payloadFile, "payload-file", "", "file holding the message body (- for stdin)")
	f.DurationVar(&expiresIn, "expires-in", 0, "dead-letter the message as expired instead of publishing it if no relay published it within this time (default: never)")
	return cmd
}
