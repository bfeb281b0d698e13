package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// countingStore counts a drain's claims by what they brought back, so
// that a drain that does not speed up with workers can be told apart as
// starved (claims coming back empty or short) or slowed (full claims, each
// dearer).
type countingStore struct {
	*outboxpg.Store
	claims, empty, short atomic.Int64
}

func (s *countingStore) SettleAndClaim(ctx context.Context, settle outboxdriver.Settlement, claim outboxdriver.Claim) ([]outbox.Message, error) {
	msgs, err := s.Store.SettleAndClaim(ctx, settle, claim)
	if claim.Limit > 0 && err == nil {
		s.claims.Add(1)
		switch {
		case len(msgs) == 0:
			s.empty.Add(1)
		case len(msgs) < claim.Limit:
			s.short.Add(1)
		}
	}
	return msgs, err
}

// tableCounts are the table's statistics a drain changes: index entries
// the pending index returned (rows visited by claims and probes), rows
// updated (a transaction-lease drain updates none unless claims fell back
// to leases), inserted (put back) and deleted.
type tableCounts struct {
	visited, updated, inserted, deleted int64
}

// readTableCounts reads them once every backend of pool has reported its
// statistics: PostgreSQL flushes them when a backend goes idle, at most
// once a second, so the pool's connections are closed first (a backend
// reports at exit) and the counts read until they stop changing.
func readTableCounts(b *testing.B, pool *pgxpool.Pool, schema string) tableCounts {
	b.Helper()
	pool.Reset()
	ctx := context.Background()
	var last tableCounts
	deadline := time.Now().Add(10 * time.Second)
	for {
		var c tableCounts
		err := pool.QueryRow(ctx, `
			SELECT (SELECT COALESCE(sum(idx_tup_read), 0)::bigint FROM pg_stat_user_indexes
					WHERE schemaname = $1 AND indexrelname = 'outbox_pending_idx'),
				n_tup_upd, n_tup_ins, n_tup_del
			FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox'`, schema).
			Scan(&c.visited, &c.updated, &c.inserted, &c.deleted)
		if err != nil {
			b.Fatal(err)
		}
		if c == last || time.Now().After(deadline) {
			return c
		}
		last = c
		time.Sleep(1100 * time.Millisecond)
	}
}

// reportDrainCounts reports, per drained message, what the drain visited
// and wrote, and per drain its claims.
func reportDrainCounts(b *testing.B, s *countingStore, before, after tableCounts, cpu *drainCPU) {
	n := float64(backlog * b.N)
	b.ReportMetric(cpu.db*1e6/n, "dbcpu-µs/msg")
	b.ReportMetric(cpu.relay*1e6/n, "relaycpu-µs/msg")
	b.ReportMetric(float64(s.claims.Load())/float64(b.N), "claims/op")
	b.ReportMetric(float64(s.empty.Load())/float64(b.N), "empty/op")
	b.ReportMetric(float64(s.short.Load())/float64(b.N), "short/op")
	b.ReportMetric(float64(after.visited-before.visited)/n, "visited/msg")
	b.ReportMetric(float64(after.updated-before.updated)/n, "updated/msg")
	// Less the backlog's own inserts: the rows open claims put back.
	b.ReportMetric(float64(after.inserted-before.inserted)/n-1, "putback/msg")
}

// backendCPU follows the CPU time of the client backends of a database
// (the relay's, the database running on this machine as in the benchmarks'
// set-up), through their /proc entries, on a connection of its own that it
// leaves out: CPU time, unlike throughput, barely depends on what else the
// shared machine runs.
type backendCPU struct {
	conn    *pgx.Conn
	base    map[int]int64 // ticks at start
	last    map[int]int64 // ticks last seen
	stop    chan struct{}
	stopped chan struct{}
}

func startBackendCPU(pool *pgxpool.Pool) *backendCPU {
	conn, err := pgx.ConnectConfig(context.Background(), pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil
	}
	c := &backendCPU{conn: conn, base: map[int]int64{}, last: map[int]int64{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	for pid, t := range c.sample() {
		c.base[pid] = t
		c.last[pid] = t
	}
	go func() {
		defer close(c.stopped)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
				for pid, t := range c.sample() {
					c.last[pid] = t
				}
			}
		}
	}()
	return c
}

// sample reads the CPU ticks of every client backend of the database.
func (c *backendCPU) sample() map[int]int64 {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := c.conn.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil
	}
	out := map[int]int64{}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = ut + st
	}
	return out
}

// seconds stops following and returns the backends' CPU seconds since the start.
func (c *backendCPU) seconds() float64 {
	if c == nil {
		return 0
	}
	close(c.stop)
	<-c.stopped
	for pid, t := range c.sample() {
		c.last[pid] = t
	}
	_ = c.conn.Close(context.Background())
	var ticks int64
	for pid, t := range c.last {
		ticks += t - c.base[pid]
	}
	return float64(ticks) / 100 // USER_HZ
}

// drainCPU adds up the CPU time of the database's backends and of this
// process over the drains, leaving out the fills between them.
type drainCPU struct {
	db, relay float64 // seconds
	following *backendCPU
	relayFrom time.Duration
}

// resume starts counting, after a fill.
func (d *drainCPU) resume(pool *pgxpool.Pool) {
	d.following = startBackendCPU(pool)
	d.relayFrom = processCPU()
}

// pause stops counting, before a fill and after the last drain.
func (d *drainCPU) pause() {
	if d.following == nil {
		return
	}
	d.db += d.following.seconds()
	d.relay += (processCPU() - d.relayFrom).Seconds()
	d.following = nil
}

// processCPU is this process's CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
