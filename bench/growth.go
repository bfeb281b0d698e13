package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpg"
)

// Growth: does the table stay small over a long run with retention on? The
// relay keeps each published message (status published) for Retention and
// its cleanup deletes expired ones in batches of RetentionBatch; writers
// commit at a steady rate meanwhile. A sampler records the table every
// second: the rows waiting for cleanup (published, past retention) must stay
// bounded, and the table's size must level off rather than grow with the
// number of messages written.

const (
	growthWriters   = 4
	growthPerTx     = 10 // messages per writer transaction
	growthRetention = time.Second
	growthCatchUp   = 2 * time.Minute // after writing, how long cleanup may take to catch up
)

func (e *env) measureGrowth(ctx context.Context) (*Growth, error) {
	opts, drop, err := e.outboxTable(ctx, "growth")
	if err != nil {
		return nil, err
	}
	defer drop()
	table := quote(opts.Schema) + ".outbox"
	res := &Growth{Messages: e.opts.Growth, Retention: growthRetention}
	if res.Before, err = e.tableState(ctx, table); err != nil {
		return nil, err
	}

	pool, err := e.pool(ctx, poolOptions{maxConns: outbox.WorkersDefault + 3 + growthWriters})
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		return nil, err
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		return nil, err
	}
	relay, err := outbox.NewRelay(store, outbox.PublisherFunc(func(_ context.Context, m []outbox.Message) []error { return make([]error, len(m)) }),
		outbox.Config{Retention: growthRetention, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(runCtx) }()
	defer func() { cancel(); <-relayDone }()

	start := time.Now()
	var written atomic.Int64
	writeDone := make(chan error, 1)
	go func() { writeDone <- e.growthWrite(runCtx, writer, &written) }()

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var writing = true
	var writeEnd time.Time
	lastLog := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case err := <-writeDone:
			if err != nil {
				return nil, fmt.Errorf("growth writers: %w", err)
			}
			writing = false
			writeEnd = time.Now()
			res.WriteRate = float64(written.Load()) / writeEnd.Sub(start).Seconds()
			writeDone = nil
			continue
		case <-ticker.C:
		}
		s, age, err := e.growthSample(ctx, pool, table)
		if err != nil {
			return nil, err
		}
		s.At, s.Written = time.Since(start), written.Load()
		res.Samples = append(res.Samples, s)
		res.MaxExpired = max(res.MaxExpired, s.Expired)
		res.CleanupLagMax = max(res.CleanupLagMax, age)
		res.Peak.TotalBytes = max(res.Peak.TotalBytes, s.TotalBytes)
		res.Peak.DeadTuples = max(res.Peak.DeadTuples, s.DeadTuples)
		if time.Since(lastLog) >= 10*time.Second {
			lastLog = time.Now()
			e.logf("growth: %s written, %s pending, %s kept, %s expired, table %s, %s dead tuples",
				thousands(float64(s.Written)), thousands(float64(s.Pending)), thousands(float64(s.Kept)), thousands(float64(s.Expired)), mib(s.TotalBytes), thousands(float64(s.DeadTuples)))
		}
		if !writing && s.Pending == 0 && s.Expired == 0 {
			res.CaughtUp = true
			break
		}
		if !writing && time.Since(writeEnd) > growthCatchUp {
			break
		}
	}
	res.Duration = time.Since(start)
	// The statistics (dead tuples) lag by up to a second or so.
	time.Sleep(1500 * time.Millisecond)
	if res.After, err = e.tableState(ctx, table); err != nil {
		return nil, err
	}
	res.Peak.TotalBytes = max(res.Peak.TotalBytes, res.After.TotalBytes)
	res.Peak.DeadTuples = max(res.Peak.DeadTuples, res.After.DeadTuples)
	return res, nil
}

// growthWrite commits opts.Growth messages, growthPerTx per transaction, at
// opts.GrowthRate messages per second (as fast as possible if 0).
func (e *env) growthWrite(ctx context.Context, w *outbox.Writer[pgx.Tx], written *atomic.Int64) error {
	payload := payloadOf(e.opts.PayloadBytes)
	txs := (e.opts.Growth + growthPerTx - 1) / growthPerTx
	var next atomic.Int64
	var interval time.Duration
	if e.opts.GrowthRate > 0 {
		interval = time.Second * growthPerTx / time.Duration(e.opts.GrowthRate)
	}
	start := time.Now()
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range growthWriters {
		wg.Go(func() {
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= int64(txs) {
					return
				}
				if interval > 0 {
					if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
						time.Sleep(d)
					}
				}
				n := min(growthPerTx, e.opts.Growth-int(k)*growthPerTx)
				msgs := make([]*outbox.Message, n)
				for i := range msgs {
					msgs[i] = &outbox.Message{Topic: "bench.growth", Key: fmt.Sprint(k % 64), Payload: payload}
				}
				err := w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				written.Add(int64(n))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// growthSample counts the table's rows by state (each count reads its
// partial index) and reads its size and dead tuples. It also returns how far
// past its expiry the oldest expired row is: the cleanup's lag.
func (e *env) growthSample(ctx context.Context, pool *pgxpool.Pool, table string) (GrowthSample, time.Duration, error) {
	var s GrowthSample
	var lagMicros int64
	retention := growthRetention.Microseconds()
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+table+` WHERE status = 'pending'),
		(SELECT count(*) FROM `+table+` WHERE status = 'published' AND published_at >= now() - $1 * interval '1 microsecond'),
		(SELECT count(*) FROM `+table+` WHERE status = 'published' AND published_at < now() - $1 * interval '1 microsecond'),
		(SELECT COALESCE(GREATEST(0, EXTRACT(EPOCH FROM now() - $1 * interval '1 microsecond' - min(published_at)) * 1000000), 0)::bigint
			FROM `+table+` WHERE status = 'published'),
		pg_total_relation_size($2::regclass),
		COALESCE((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $2::regclass), 0)`,
		retention, table).Scan(&s.Pending, &s.Kept, &s.Expired, &lagMicros, &s.TotalBytes, &s.DeadTuples)
	return s, time.Duration(lagMicros) * time.Microsecond, err
}

func (e *env) tableState(ctx context.Context, table string) (TableState, error) {
	var t TableState
	err := e.admin.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass),
		COALESCE(n_dead_tup, 0), COALESCE(n_live_tup, 0), COALESCE(autovacuum_count, 0)
		FROM (SELECT 1) one LEFT JOIN pg_stat_user_tables ON relid = $1::regclass`, table).
		Scan(&t.TotalBytes, &t.DeadTuples, &t.LiveTuples, &t.Autovacuum)
	return t, err
}
