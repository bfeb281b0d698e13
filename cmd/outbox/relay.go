package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
)

func newRelayCommand(g *globalFlags) *cobra.Command {
	var (
		cfg             outbox.Config
		publisherURL    string
		shutdownTimeout time.Duration
		orderByKey      bool
		skipDead        bool
		watchWAL        bool
		txLeases        bool
		metricsAddr     string
		rateLimits      []string
		claimCheckURL   string
		tables          string
		rescanInterval  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish the table's messages until interrupted",
		Long: `relay claims due messages in batches, publishes them and records the outcome,
until SIGINT or SIGTERM; then it finishes the batches in flight (or releases them
after --shutdown-timeout) and exits. With --tables 'tenant_*.outbox' (PostgreSQL) it
serves the outbox table of every schema the pattern matches, found again every
--rescan-interval, with one relay of --workers (default 1 there) per table.

Publishers (--publisher); secrets in URLs are never logged:
  stdout:                          one JSON object per line
  kafka://host:9092,host2:9092     ?topic=fixed to send every message to one topic
  amqp://user:pass@host:5672/vhost ?exchange=x&routing_key=...
  nats://host:4222                 ?stream=S&subject_prefix=p.
  redis://user:pass@host:6379/S    stream S (none: one per topic; digits go in ?stream=);
                                   password also in $REDIS_PASSWORD;
                                   ?db=N&stream=S&maxlen=N&stream_prefix=p:
  pubsub://PROJECT/TOPIC           Google Cloud Pub/Sub topic TOPIC (none: one per topic);
                                   credentials from $GOOGLE_APPLICATION_CREDENTIALS or the
                                   metadata server; $PUBSUB_EMULATOR_HOST for the emulator;
                                   ?topic_prefix=p-&ordering_keys=true&timeout=10s
  sqs://sqs.REGION.amazonaws.com/ACCOUNT/NAME
                                   Amazon SQS queue (sqs://NAME: by name, in the region)
  sns:arn:aws:sns:REGION:ACCOUNT:NAME
                                   Amazon SNS topic; for both, credentials from the SDK's
                                   chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, the role), never
                                   the URL; ?region=R&endpoint=http://localhost:4566&timeout=10s
  https://host/path                webhook; signing secret in $OUTBOX_WEBHOOK_SECRET
                                   (whsec_ + base64, or 16+ plain bytes);
                                   outbox_timeout=5s, outbox_concurrency=N, outbox_sequential=true`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := g.logger
			cfg.Logger = logger
			var err error
			if cfg.TopicRateLimits, err = parseRateLimits(rateLimits); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return relayFlagError(err)
			}
			if shutdownTimeout < 0 {
				return usagef("--shutdown-timeout %v: use a positive duration, or 0 to cancel publishing at once", shutdownTimeout)
			}
			switch {
			case tables == "" && cmd.Flags().Changed("rescan-interval"):
				return usagef("--rescan-interval is how often --tables looks for tables: give it with --tables")
			case tables != "" && rescanInterval <= 0:
				return usagef("--rescan-interval %v: use a positive duration, e.g. 1m", rescanInterval)
			}
			var tableSchemas, tableName string
			if tables != "" {
				// Before the publisher dials its broker: a mistyped
				// pattern is reported as such.
				if tableSchemas, tableName, err = tablesPattern(tables); err != nil {
					return err
				}
			}
			var metrics *metricsServer
			if metricsAddr != "" {
				if metrics, err = listenMetrics(metricsAddr); err != nil {
					return err
				}
				defer metrics.close()
				cfg.Observer = metrics.observer
			}
			pub, err := openPublisher(publisherURL, cmd)
			if err != nil {
				return err
			}
			defer pub.Close()
			cc, err := openClaimCheck(cmd.Context(), claimCheckURL, true)
			if err != nil {
				return err
			}
			if pub, err = cc.wrap(pub); err != nil {
				return err
			}
			mode := storeMode{orderByKey: orderByKey, skipDead: skipDead, watchWAL: watchWAL, txLeases: txLeases, workers: cmp.Or(cfg.Workers, outbox.WorkersDefault)}
			if tables != "" {
				if !cmd.Flags().Changed("workers") {
					cfg.Workers = 1
				}
				src, closeSource, err := g.openTables(cmd.Context(), tableSchemas, tableName, mode)
				if err != nil {
					return err
				}
				defer closeSource()
				tcfg := outbox.TablesConfig{Relay: cfg, RescanInterval: rescanInterval}
				if metrics != nil {
					tcfg.OnServe = metrics.watchTables(logger)
				}
				tr, err := outbox.NewTablesRelay(src, pub, tcfg)
				if err != nil {
					return relayFlagError(err)
				}
				if metrics != nil {
					metrics.watchTablesRelay(tr)
					metrics.serve(logger)
				}
				return runUntilSignal(cmd.Context(), logger, shutdownTimeout, cc, tr.Run, tr.Shutdown)
			}
			b, err := g.openReady(cmd.Context(), mode)
			if err != nil {
				return err
			}
			defer b.close()
			relay, err := outbox.NewRelay(b.store, pub, cfg)
			if err != nil {
				return err
			}
			if metrics != nil {
				if err := metrics.start(relay, b.admin, b.store.Name(), logger); err != nil {
					return err
				}
			}
			return runUntilSignal(cmd.Context(), logger, shutdownTimeout, cc, relay.Run, relay.Shutdown)
		},
	}
	f := cmd.Flags()
	f.StringVar(&publisherURL, "publisher", "stdout:", "where to publish: stdout:, kafka://host:9092, amqp://user:pass@host:5672/vhost?exchange=x, nats://host:4222?stream=s, redis://host:6379/stream, pubsub://project/topic, https://host/hook")
	f.IntVar(&cfg.BatchSize, "batch-size", outbox.BatchSizeDefault, "messages claimed and published at once")
	f.IntVar(&cfg.Workers, "workers", outbox.WorkersDefault, "batches published concurrently")
	f.DurationVar(&cfg.LeaseDuration, "lease", outbox.LeaseDurationDefault, "how long a claimed batch stays reserved")
	f.IntVar(&cfg.MaxAttempts, "max-attempts", outbox.MaxAttemptsDefault, "failed attempts before a message is dead-lettered")
	f.DurationVar(&cfg.BackoffBase, "backoff-base", outbox.BackoffBaseDefault, "cap of the first retry delay (doubles per failure)")
	f.DurationVar(&cfg.BackoffMax, "backoff-max", outbox.BackoffMaxDefault, "cap of every retry delay")
	f.DurationVar(&cfg.PollInterval, "poll-interval", outbox.PollIntervalDefault, "longest wait between looks at the table")
	f.DurationVar(&cfg.ActivePollInterval, "active-poll-interval", outbox.ActivePollIntervalDefault, "first wait after work was found (doubles up to --poll-interval)")
	f.DurationVar(&cfg.Retention, "retention", outbox.RetentionDefault, "keep published messages this long (0 deletes them on publish)")
	f.BoolVar(&cfg.DisableListen, "poll-only", false, "poll only: no PostgreSQL LISTEN (needed behind a transaction-mode pooler), no SQLite change watcher")
	f.BoolVar(&txLeases, "transaction-leases", false, "PostgreSQL and MySQL: hold each batch's rows in a transaction while they are published instead of writing a lease into them (faster; one connection per worker in flight; on PostgreSQL the pool grows to --workers + 3 unless the URL sets pool_max_conns; MySQL not with --order-by-key; in-flight messages show as pending)")
	f.BoolVar(&watchWAL, "watch-wal", false, "PostgreSQL: wake up when the table's inserts reach the write-ahead log (a temporary logical replication slot; needs wal_level=logical and a role with REPLICATION), instead of polling; writers need no NOTIFY")
	f.BoolVar(&orderByKey, "order-by-key", false, "publish the messages of each key one at a time in the order they were written; a failing message holds back only its key, and a dead one holds the rest of its key until it is retried or discarded (give it to every relay of the table)")
	f.BoolVar(&skipDead, "skip-dead-in-key-order", false, "with --order-by-key, let a key go on past a dead message instead of waiting until it is retried or discarded (a later retry then sends it after the key's later messages)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", outbox.HeartbeatIntervalDefault, "how often the relay refreshes its row in the table's relay registry (`outbox status` shows a relay not seen for three as gone)")
	f.DurationVar(&cfg.PauseCheckInterval, "pause-check-interval", outbox.PauseCheckIntervalDefault, "how often, at most, the relay reads the paused topics (`outbox pause`) while it has messages to publish")
	f.StringArrayVar(&rateLimits, "rate-limit", nil, "TOPIC=N: publish at most N messages a second of TOPIC from this relay (repeatable); the rest wait, without counting an attempt")
	f.DurationVar(&shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long to let in-flight batches finish on SIGINT/SIGTERM")
	f.StringVar(&claimCheckURL, "claim-check", "", claimCheckFlagUsage+"; a file: store's blobs are swept after ?retention= (default 720h)")
	f.StringVar(&tables, "tables", "", tablesFlagUsage)
	f.DurationVar(&rescanInterval, "rescan-interval", outbox.RescanIntervalDefault, "with --tables, how often to look for tables added or dropped")
	f.StringVar(&metricsAddr, "metrics-addr", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (default: none)")
	return cmd
}

// runUntilSignal runs a relay (run) until ctx ends, on a context the
// signal does not cancel: the signal asks for a graceful shutdown instead,
// given timeout to finish the batches in flight. It sweeps the claim
// check's store meanwhile.
func runUntilSignal(ctx context.Context, logger *slog.Logger, timeout time.Duration, cc *claimCheck, run, shutdown func(context.Context) error) error {
	runCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	go cc.sweep(runCtx, logger)
	done := make(chan error, 1)
	go func() { done <- run(runCtx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	logger.Info("outbox relay: stopping", slog.Duration("timeout", timeout))
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return <-done
}

// relayFlags names the flag that sets each field of outbox.Config.
var relayFlags = map[string]string{
	"Config.ActivePollInterval":   "--active-poll-interval",
	"Config.BackoffBase":          "--backoff-base",
	"Config.BackoffMax":           "--backoff-max",
	"Config.BatchSize":            "--batch-size",
	"Config.HeartbeatInterval":    "--heartbeat-interval",
	"Config.LeaseDuration":        "--lease",
	"Config.MaxAttempts":          "--max-attempts",
	"Config.PauseCheckInterval":   "--pause-check-interval",
	"Config.PollInterval":         "--poll-interval",
	"Config.Retention":            "--retention",
	"Config.Workers":              "--workers",
	"TablesConfig.RescanInterval": "--rescan-interval",
}

// fieldsToFlags rewrites the Config fields a fix mentions into their flags.
var fieldsToFlags = func() *strings.Replacer {
	var pairs []string
	for field, flag := range relayFlags {
		pairs = append(pairs, field, flag)
	}
	return strings.NewReplacer(pairs...)
}()

// relayFlagError turns an invalid outbox.Config into a usage error that
// names the flag the user typed rather than the Config field.
func relayFlagError(err error) error {
	var ce *outbox.ConfigError
	if !errors.As(err, &ce) || relayFlags[ce.Field] == "" {
		return err
	}
	return usagef("%s %v: %s", relayFlags[ce.Field], ce.Value, fieldsToFlags.Replace(ce.Fix))
}

// unexpectedPath is the error for a broker URL with a path, which hint says
// how to avoid. A path with an @ is most likely the end of a password with an
// unescaped '/', cut there by the URL syntax: it is not shown.
func unexpectedPath(path, hint string) error {
	if strings.Contains(path, "@") {
		return fmt.Errorf("unexpected '/' before the host: percent-encode '/' in a user name or password as %%2F; %s", hint)
	}
	return fmt.Errorf("unexpected path /%s; %s", path, hint)
}

// openPublisher builds the publisher a --publisher URL names; the scheme picks
// the broker. Each broker's glue lives in its own file (publisher_*.go).
func openPublisher(raw string, cmd *cobra.Command) (outbox.Publisher, error) {
	rememberSecret(raw)
	scheme, _, _ := strings.Cut(raw, ":")
	switch strings.ToLower(scheme) {
	case "stdout":
		return &outbox.JSONLines{W: cmd.OutOrStdout()}, nil
	case "kafka":
		return openKafka(raw)
	case "amqp", "amqps":
		return openAMQP(raw)
	case "nats", "tls":
		return openNATS(raw)
	case "redis", "rediss":
		return openRedis(raw)
	case "pubsub":
		return openPubSub(raw)
	case "sqs":
		return openSQS(raw)
	case "sns":
		return openSNS(raw)
	case "http", "https":
		return openWebhook(raw)
	default:
		return nil, usagef("--publisher %q: unknown scheme %q; use stdout:, kafka://, amqp://, nats://, redis://, pubsub://, sqs://, sns: or https://", redact(raw), scheme)
	}
}

// newLogger makes the logger of --log-level and --log-format. Every record
// goes through redactAttr, so no password reaches the logs.
func newLogger(level, format string, w io.Writer) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: redactAttr}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usagef("--log-format %q: use text or json", format)
}

// redactAttr keeps passwords out of logs, whatever logged them.
func redactAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redact(a.Value.String()))
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, redact(err.Error()))
		}
	}
	return a
}

// parseRateLimits parses --rate-limit TOPIC=N values.
func parseRateLimits(values []string) (map[string]float64, error) {
	if len(values) == 0 {
		return nil, nil
	}
	limits := map[string]float64{}
	for _, v := range values {
		topic, n, ok := strings.Cut(v, "=")
		rate, err := strconv.ParseFloat(n, 64)
		if !ok || topic == "" || err != nil || !(rate > 0) || math.IsInf(rate, 1) {
			return nil, usagef("--rate-limit %q: give TOPIC=N, N a positive number of messages a second (e.g. --rate-limit emails=50)", v)
		}
		if _, dup := limits[topic]; dup {
			return nil, usagef("--rate-limit %q: topic %q is limited twice; give it once", v, topic)
		}
		limits[topic] = rate
	}
	return limits, nil
}
