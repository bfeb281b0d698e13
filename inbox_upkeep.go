package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Seed 004's rule for inbox records: a record is the consumer's proof that a
// message was applied, and the messages the handler wrote to an outbox in
// the same transaction are part of that application. So a record is kept
// while any of them is still pending, and its retention countdown starts
// when the last of them was published. Inbox.Handle learns what the handler
// wrote from the Writer, through the context it gives the handler, and tells
// an inbox table that implements OutgoingRecorder.

// OutgoingRecorder is implemented by inbox tables that keep a record for as
// long as the messages its handler wrote to an outbox are pending
// (outboxpg.InboxTable, outboxsqlite.InboxTable).
type OutgoingRecorder[TTx any] interface {
	// RecordOutgoing notes, inside tx, that handling message id wrote the
	// messages ids to the outbox table named table (a store's Name).
	RecordOutgoing(ctx context.Context, tx TTx, consumer string, id uuid.UUID, table string, ids []uuid.UUID) error
}

// InboxPurger is an inbox table that forgets old records.
type InboxPurger interface {
	// Name names the table in logs.
	Name() string
	// PurgeProcessed deletes up to limit records whose message's effects
	// were complete more than olderThan ago, by the database's clock, oldest
	// first, and returns how many it deleted. Effects are complete when the
	// handling committed and every message it wrote to the outbox was
	// published (or deleted); until then a record is never purged.
	PurgeProcessed(ctx context.Context, olderThan time.Duration, limit int) (int, error)
}

// InboxPurgeConfig configures PurgeInbox. The zero value keeps records for
// InboxRetentionDefault and purges every 10 minutes, 1,000 records a batch.
type InboxPurgeConfig struct {
	// Retention is how long a record is kept after its message's effects
	// were complete. Keep it far longer than the broker redelivers: a
	// message redelivered after its record is gone is applied again.
	// Default InboxRetentionDefault (14 days).
	Retention time.Duration
	// Interval is the pause between two purges. Default 10 minutes.
	Interval time.Duration
	// BatchSize bounds the records one statement deletes, so that a purge
	// holds its locks briefly. Default 1,000.
	BatchSize int
	// Logger receives what each purge deleted and its failures. Default
	// slog.Default().
	Logger *slog.Logger
}

// Defaults of InboxPurgeConfig.
const (
	InboxPurgeIntervalDefault  = 10 * time.Minute
	InboxPurgeBatchSizeDefault = 1000
)

func (c InboxPurgeConfig) withDefaults() (InboxPurgeConfig, error) {
	switch {
	case c.Retention < 0:
		return c, &ConfigError{Field: "InboxPurgeConfig.Retention", Value: c.Retention.String(), Fix: "use 0 for the default (14 days) or a positive duration"}
	case c.Interval < 0:
		return c, &ConfigError{Field: "InboxPurgeConfig.Interval", Value: c.Interval.String(), Fix: "use 0 for the default (10m) or a positive duration"}
	case c.BatchSize < 0:
		return c, &ConfigError{Field: "InboxPurgeConfig.BatchSize", Value: fmt.Sprint(c.BatchSize), Fix: "use 0 for the default (1000) or a positive number"}
	}
	if c.Retention == 0 {
		c.Retention = InboxRetentionDefault
	}
	if c.Interval == 0 {
		c.Interval = InboxPurgeIntervalDefault
	}
	if c.BatchSize == 0 {
		c.BatchSize = InboxPurgeBatchSizeDefault
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// PurgeInbox purges table's old records now and then every cfg.Interval,
// in batches, until ctx ends; then it returns nil. Run it in any number of
// consumer processes: the PostgreSQL table lets one purge at a time, the
// others skip their turn. A failed purge is logged and tried again at the
// next interval. It returns a *ConfigError at once for a bad cfg.
func PurgeInbox(ctx context.Context, table InboxPurger, cfg InboxPurgeConfig) error {
	if table == nil {
		return &ConfigError{Field: "PurgeInbox table", Value: "nil", Fix: "pass an inbox table, e.g. outboxpg.NewInboxTable"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	log := cfg.Logger.With(slog.String("table", table.Name()))
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		if n, err := PurgeInboxOnce(ctx, table, cfg.Retention, cfg.BatchSize); err != nil && ctx.Err() == nil {
			log.Warn("outbox inbox: purge failed; trying again at the next interval", slog.Int("deleted", n), slog.Duration("interval", cfg.Interval), slog.Any("error", err))
		} else if n > 0 {
			log.Info("outbox inbox: purged old records", slog.Int("deleted", n), slog.Duration("retention", cfg.Retention))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// PurgeInboxOnce deletes every record of table older than retention, in
// batches of batchSize, and returns how many it deleted. A failure that
// left the purge able to delete (an outbox table it cannot read, whose
// records stay) is returned after the last batch.
func PurgeInboxOnce(ctx context.Context, table InboxPurger, retention time.Duration, batchSize int) (deleted int, err error) {
	for {
		callCtx, cancel := context.WithTimeout(ctx, storeCallTimeout)
		n, callErr := table.PurgeProcessed(callCtx, retention, batchSize)
		cancel()
		deleted += n
		if callErr != nil {
			err = callErr // reported; a purge that still deleted goes on
		}
		if n < batchSize || callErr != nil && n == 0 {
			return deleted, err
		}
	}
}

// writtenKey is the context key of a *written: Inbox.Handle gives the
// handler a context that carries one, and Writer.Write notes in it what it
// inserted.
type writtenKey struct{}

// written collects the ids of messages written, by outbox table.
type written struct {
	mu      sync.Mutex
	byTable map[string][]uuid.UUID
}

func withWritten(ctx context.Context) (context.Context, *written) {
	w := &written{}
	return context.WithValue(ctx, writtenKey{}, w), w
}

// noteWritten tells the collector of ctx, if any, that msgs were inserted
// into table.
func noteWritten(ctx context.Context, table string, msgs []*Message) {
	w, ok := ctx.Value(writtenKey{}).(*written)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byTable == nil {
		w.byTable = map[string][]uuid.UUID{}
	}
	for _, m := range msgs {
		w.byTable[table] = append(w.byTable[table], m.ID)
	}
}

// wakeWritten wakes the relays of this process that serve the tables
// written to.
func wakeWritten(w *written) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for table := range w.byTable {
		wakeTopicFor(table).notify()
	}
}
