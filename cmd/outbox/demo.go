package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/outboxnats"
)

func newDemoCommand() *cobra.Command {
	var (
		database string
		dir      string
		keep     bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Show the whole flow in one process, nothing installed: SQLite (or MySQL), a relay, embedded NATS, a consumer",
		Long: `demo runs everything in this process: orders written with their events in one
SQLite transaction, a relay publishing them to an embedded NATS JetStream server, and a
consumer applying each event exactly once through an inbox. Along the way it rolls a
transaction back, stops the broker and starts it again, replays a message whose
acknowledgement was "lost", and dead-letters a poison message. It checks every step and
exits non-zero if any guarantee did not hold.

With --database mysql://user:password@host:3306/db it runs the same steps on that MySQL or
MariaDB database instead of a SQLite file. Its tables there are all named outbox_demo or
outbox_demo_* and marked as the demo's by their comment: it drops them at the end (unless
--keep), drops those an earlier demo left, and stops without changing anything if a table
with such a name is not marked as its own. It changes no other table. --database-url
names the database too; DATABASE_URL does not: the demo runs on a server only when its
command line says so.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			raw, err := demoDatabase(cmd, database)
			if err != nil {
				return err
			}
			if dir == "" {
				d, err := os.MkdirTemp("", "outbox-demo-")
				if err != nil {
					return err
				}
				dir = d
				if !keep || raw != "" {
					defer os.RemoveAll(d)
				}
			}
			d := &demo{out: cmd.OutOrStdout(), dir: dir, database: raw, keep: keep}
			defer d.close()
			return d.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&database, "database", "", "run on this MySQL or MariaDB database, "+mysqlURLForm+", instead of a SQLite file; the demo's tables there are named outbox_demo*")
	cmd.Flags().StringVar(&dir, "dir", "", "directory for the SQLite file and the NATS store (default: a temporary one, removed afterwards)")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep the temporary directory, to look at demo.db with outbox status/dead afterwards (with --database: keep the demo's tables)")
	return cmd
}

// demoDatabase returns the database URL of --database, or of --database-url,
// which every other command takes: typed out of habit, it must not get the
// user a SQLite demo instead. DATABASE_URL is left alone: the demo creates
// and drops tables, so it runs on a database only when its command line
// names one. "" is the SQLite demo.
func demoDatabase(cmd *cobra.Command, database string) (string, error) {
	flag := "--database"
	if f := cmd.Flag("database-url"); f != nil && f.Changed {
		if database != "" && database != f.Value.String() {
			return "", usagef("--database and --database-url name different databases; give the demo one of them")
		}
		if database == "" {
			flag = "--database-url"
		}
		database = f.Value.String()
	}
	if database == "" {
		return "", nil
	}
	rememberSecret(database)
	if scheme := urlScheme(database); scheme != "mysql" {
		shown := shownURL(database)
		if u, err := url.Parse(database); err == nil {
			shown = strconv.Quote(u.Redacted())
		}
		why := fmt.Sprintf("not on %q", scheme)
		if scheme == "" {
			why = "this is not a URL"
		}
		return "", usagef("%s %s: the demo runs on MySQL or MariaDB, %s, or on SQLite in a temporary directory with %s left out; %s",
			flag, shown, mysqlURLForm, flag, why)
	}
	return database, nil
}

// demo holds the parts of the demonstration.
type demo struct {
	out          io.Writer
	database     string // a mysql:// URL, or "" for SQLite in dir
	dir          string
	keep         bool
	start        time.Time
	db           *demoDB
	store        demoStore // db's
	writer       *outbox.Writer[*sql.Tx]
	inbox        *outbox.Inbox[*sql.Tx]
	nats         *natstest.Server
	pub          *outboxnats.Publisher
	relay        *outbox.Relay
	relayDone    chan error
	stopConsumer func()
	stopRelay    context.CancelFunc
	unavailable  atomic.Int64 // messages the relay found NATS unavailable for

	mu       sync.Mutex
	consumed map[string]int // message id -> deliveries seen by the consumer
	applied  chan struct{}  // signalled after each applied or skipped delivery
}

const demoStream = "ORDERS"

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "[%6.3fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) run(ctx context.Context) error {
	d.start = time.Now()
	d.consumed = map[string]int{}
	d.applied = make(chan struct{}, 1)
	if err := d.setUp(ctx); err != nil {
		return err
	}
	steps := []func(context.Context) error{d.ordersFlow, d.rollback, d.brokerOutage, d.lostAck, d.poison, d.summary}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	return nil
}

func (d *demo) setUp(ctx context.Context) error {
	var err error
	if d.database == "" {
		d.db, err = openDemoSQLite(ctx, d.dir)
	} else {
		d.db, err = openDemoMySQL(ctx, d.database, d.keep)
	}
	if err != nil {
		return err
	}
	d.store = d.db.store
	if d.inbox, err = outbox.NewInbox(d.db.inbox, "revenue"); err != nil {
		return err
	}
	if d.writer, err = outbox.NewWriter(d.store, outbox.WriterConfig{}); err != nil {
		return err
	}
	d.say("%s", d.db.about)

	if d.nats, err = natstest.Run(server.Options{StoreDir: filepath.Join(d.dir, "nats")}); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Reconnect quickly after the outage the demo stages (nats.go waits 2s by default).
	natsOpts := []nats.Option{nats.ReconnectWait(100 * time.Millisecond)}
	if d.pub, err = outboxnats.Dial(d.nats.URL(), outboxnats.Config{Stream: demoStream, AckTimeout: time.Second, Logger: quiet, ConnectOptions: natsOpts}); err != nil {
		return err
	}
	js := d.pub.JetStream()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: demoStream, Subjects: []string{"orders.>"}, Duplicates: 10 * time.Minute, MaxMsgSize: demoMaxMsgSize}); err != nil {
		return err
	}
	d.say("embedded NATS JetStream at %s: stream %s on orders.>, duplicate window 10m, messages up to %d KiB", d.nats.URL(), demoStream, demoMaxMsgSize>>10)

	if err := d.startConsumer(ctx, js); err != nil {
		return err
	}
	// Count the tries that found NATS down, to show them during the outage.
	watched := outbox.PublisherFunc(func(ctx context.Context, batch []outbox.Message) []error {
		errs := d.pub.Publish(ctx, batch)
		for _, err := range errs {
			if outbox.IsUnavailable(err) {
				d.unavailable.Add(1)
			}
		}
		return errs
	})
	d.relay, err = outbox.NewRelay(d.store, watched, outbox.Config{
		BatchSize: 50, BackoffBase: 200 * time.Millisecond, BackoffMax: time.Second, MaxAttempts: 20,
		PollInterval: 500 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		return err
	}
	relayCtx, stop := context.WithCancel(ctx)
	d.stopRelay, d.relayDone = stop, make(chan error, 1)
	go func() { d.relayDone <- d.relay.Run(relayCtx) }()
	d.say("relay running: batches of 50, retries after 0-200ms doubling to 1s")
	return nil
}

// startConsumer consumes the stream with the JetStream consumer adapter and
// applies each order event once: the inbox row and the effect commit in one
// transaction, and the adapter acknowledges only after that commit.
func (d *demo) startConsumer(ctx context.Context, js jetstream.JetStream) error {
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	cfg := outboxnats.ConsumerConfig{Stream: demoStream, Durable: "revenue", Logger: slog.New(slog.DiscardHandler)}
	go func() { done <- outboxnats.Consume(ctx, js, cfg, d.apply) }()
	d.stopConsumer = func() {
		stop()
		<-done
	}
	return nil
}

// apply is the consumer's handler: the effect, behind the inbox.
func (d *demo) apply(ctx context.Context, m outbox.Message) error {
	var cents int
	if _, err := fmt.Sscanf(string(m.Payload), `{"total_cents":%d}`, &cents); err != nil {
		return outbox.Permanent(err)
	}
	// A delivery seen before is skipped, and acknowledged again.
	_, err := d.inbox.Handle(ctx, m.ID, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, d.db.sql.applyRevenue, m.Key, cents)
		return err
	})
	if err != nil {
		return err
	}
	rawID := m.ID.String()
	d.mu.Lock()
	d.consumed[rawID]++
	d.mu.Unlock()
	select {
	case d.applied <- struct{}{}:
	default:
	}
	return nil
}

// placeOrder writes an order and its event in one transaction.
func (d *demo) placeOrder(ctx context.Context, id int, customer string, cents int, fail bool) (*outbox.Message, error) {
	m := &outbox.Message{Topic: "orders.created", Key: customer, Payload: fmt.Appendf(nil, `{"total_cents":%d}`, cents),
		Headers: map[string]string{"content-type": "application/json"}}
	err := d.writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, d.db.sql.insertOrder, id, customer, cents); err != nil {
			return err
		}
		if err := d.writer.Write(ctx, tx, m); err != nil {
			return err
		}
		if fail {
			return errPaymentDeclined
		}
		return nil
	})
	return m, err
}

var errPaymentDeclined = errors.New("payment declined")

var demoCustomers = []string{"ada", "grace", "linus"}

func (d *demo) ordersFlow(ctx context.Context) error {
	start := time.Now()
	for i := 1; i <= 20; i++ {
		if _, err := d.placeOrder(ctx, i, demoCustomers[i%3], 1000+i, false); err != nil {
			return err
		}
	}
	if err := d.waitConsumed(ctx, 20); err != nil {
		return err
	}
	d.say("1. 20 orders committed with their events; all 20 published and applied in %v (in-process wake-up, no polling)", time.Since(start).Round(time.Millisecond))
	return nil
}

func (d *demo) rollback(ctx context.Context) error {
	m, err := d.placeOrder(ctx, 21, "ada", 999999, true)
	if !errors.Is(err, errPaymentDeclined) {
		return fmt.Errorf("rolled-back order: %v", err)
	}
	if _, err := d.store.Get(ctx, m.ID); !errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("the rolled-back event %s is stored: %v", m.ID, err)
	}
	d.say("2. order 21 rolled back (payment declined): its event %s does not exist and is never published", m.ID)
	return nil
}

func (d *demo) brokerOutage(ctx context.Context) error {
	d.nats.Shutdown()
	d.say("3. broker down: NATS stopped")
	for i := 22; i <= 31; i++ {
		if _, err := d.placeOrder(ctx, i, demoCustomers[i%3], 2000+i, false); err != nil {
			return err
		}
	}
	// Wait until the relay has found NATS down at least twice.
	if err := pollUntil(ctx, 15*time.Second, func() bool { return d.unavailable.Load() >= 2 }); err != nil {
		return errors.New("the relay never tried to publish during the outage")
	}
	st, _ := d.store.Stats(ctx)
	d.say("   10 more orders committed while it is down: the relay finds NATS unavailable, pauses and retries (%d pending)", st.Pending)
	time.Sleep(time.Second) // let the outage last a little
	attempts := d.attemptsUsed(ctx)
	if attempts < 0 || attempts > 10 {
		return fmt.Errorf("the outage used up %d attempts of the 10 orders written during it; want none (a batch in flight at the stop may count one)", attempts)
	}
	if err := d.nats.Start(); err != nil {
		return err
	}
	start := time.Now()
	if err := d.waitConsumed(ctx, 30); err != nil {
		return err
	}
	d.say("   NATS started again: the 10 waiting events published and applied %v later, none lost, %d attempt(s) used by the outage", time.Since(start).Round(time.Millisecond), attempts)
	return nil
}

// attemptsUsed returns the attempts the pending messages have counted, or -1
// if it cannot tell.
func (d *demo) attemptsUsed(ctx context.Context) int {
	var n int
	if err := d.store.DB().QueryRowContext(ctx, d.db.sql.pendingAttempts).Scan(&n); err != nil {
		return -1
	}
	return n
}

func (d *demo) lostAck(ctx context.Context) error {
	m, err := d.placeOrder(ctx, 32, "grace", 4200, false)
	if err != nil {
		return err
	}
	if err := d.waitConsumed(ctx, 31); err != nil {
		return err
	}
	js := d.pub.JetStream()
	stream, err := js.Stream(ctx, demoStream)
	if err != nil {
		return err
	}
	before, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	// The relay crashed after NATS stored the message but before it recorded
	// that: the message is published again.
	again := *m
	if errs := d.pub.Publish(ctx, []outbox.Message{again}); errs[0] != nil {
		return errs[0]
	}
	after, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	if after.State.Msgs != before.State.Msgs {
		return fmt.Errorf("JetStream stored the replayed message: %d messages, was %d", after.State.Msgs, before.State.Msgs)
	}
	// And a redelivery past any broker window reaches the consumer: its inbox
	// skips the effect.
	if err := d.apply(ctx, *m); err != nil {
		return err
	}
	d.say("4. lost acknowledgement: event %s published twice; JetStream kept one copy (Nats-Msg-Id); delivered twice to the consumer, the inbox applied it once", m.ID)
	return nil
}

// demoMaxMsgSize is the largest message the demo's stream takes; the poison
// message is larger, which no retry can change.
const demoMaxMsgSize = 64 << 10

func (d *demo) poison(ctx context.Context) error {
	payload := fmt.Appendf(nil, `{"note":%q}`, strings.Repeat("x", demoMaxMsgSize))
	m := &outbox.Message{Topic: "orders.imported", Key: "ada", Payload: payload}
	if err := d.writer.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return d.writer.Write(ctx, tx, m) }); err != nil {
		return err
	}
	if err := pollUntil(ctx, 10*time.Second, func() bool {
		got, err := d.store.Get(ctx, m.ID)
		return err == nil && got.Status == outbox.StatusDead
	}); err != nil {
		return errors.New("the poison message was not dead-lettered")
	}
	got, _ := d.store.Get(ctx, m.ID)
	d.say("5. poison message %s (%d KiB, over the stream's limit): dead-lettered after %d attempt, error kept:", m.ID, len(payload)>>10, got.Attempts)
	d.say("   %s", oneLine(got.LastError, 120))
	d.say("   inspect and fix with: outbox dead list | show ID | retry ID | discard ID")
	return nil
}

func (d *demo) summary(ctx context.Context) error {
	st, err := d.store.Stats(ctx)
	if err != nil {
		return err
	}
	var orders, cents, wantOrders, wantCents int
	if err := d.store.DB().QueryRowContext(ctx, d.db.sql.revenueTotals).Scan(&orders, &cents); err != nil {
		return err
	}
	if err := d.store.DB().QueryRowContext(ctx, d.db.sql.orderTotals).Scan(&wantOrders, &wantCents); err != nil {
		return err
	}
	if orders != wantOrders || cents != wantCents {
		return fmt.Errorf("revenue counts %d orders (%d cents); the orders table has %d (%d cents)", orders, cents, wantOrders, wantCents)
	}
	d.say("done: %d orders committed, %d applied exactly once (%d cents); outbox: %d pending, %d dead", wantOrders, orders, cents, st.Pending, st.Dead)
	return nil
}

func (d *demo) waitConsumed(ctx context.Context, n int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		d.mu.Lock()
		got := len(d.consumed)
		d.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 30s the consumer has applied %d events, want %d", got, n)
		}
		select {
		case <-d.applied:
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (d *demo) close() {
	if d.stopRelay != nil {
		d.stopRelay()
		<-d.relayDone
	}
	if d.stopConsumer != nil {
		d.stopConsumer()
	}
	if d.pub != nil {
		_ = d.pub.Close()
	}
	if d.nats != nil {
		d.nats.Shutdown()
	}
	if d.db != nil {
		d.db.close()
	}
}

func pollUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return context.DeadlineExceeded
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
