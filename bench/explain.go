package bench

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// What bounds the drain: the server-side cost of each statement the relay
// sends per batch, next to the raw ceiling's single statement, on a full
// backlog. The relay's statements are captured from a real Exchange through
// a tracer (so they are exactly what outboxpg sends), then run again under
// EXPLAIN (ANALYZE, BUFFERS, WAL) in a transaction that is rolled back; the
// WAL a statement writes is the advance of pg_current_wal_insert_lsn() around
// it. Plus the price of a commit's WAL flush, which every batch pays once.

func (e *env) measureExplain(ctx context.Context) ([]Explain, CommitCost, error) {
	opts, drop, err := e.outboxTable(ctx, "explain")
	if err != nil {
		return nil, CommitCost{}, err
	}
	defer drop()
	if err := e.fill(ctx, opts, e.opts.Backlog); err != nil {
		return nil, CommitCost{}, err
	}
	capture := &sqlCapture{}
	pool, err := e.pool(ctx, poolOptions{maxConns: 1, tracer: capture})
	if err != nil {
		return nil, CommitCost{}, err
	}
	defer pool.Close()
	store, err := outboxpg.New(pool, opts)
	if err != nil {
		return nil, CommitCost{}, err
	}

	var out []Explain
	for _, batch := range []int{100, 1000} {
		// Claim a batch, then settle it and claim the next: the relay's
		// steady state, whose statements are captured.
		t1, t2 := uuid.New(), uuid.New()
		first, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: batch, Lease: 30 * time.Second, Token: t1})
		if err != nil {
			return nil, CommitCost{}, err
		}
		capture.reset()
		second, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: t1, Published: ids(first)},
			outboxdriver.Claim{Limit: batch, Lease: 30 * time.Second, Token: t2})
		if err != nil {
			return nil, CommitCost{}, err
		}
		stmts := capture.taken()
		if len(stmts) != 2 {
			return nil, CommitCost{}, fmt.Errorf("captured %d statements from one SettleAndClaim; want settle + claim", len(stmts))
		}
		settle, claim := stmts[0], stmts[1]
		// Settle the second batch (its rows are still there) and claim a
		// third, each in its own rolled-back transaction.
		settle.args, err = e.settleArgs(ctx, quote(opts.Schema)+".outbox", t2, ids(second))
		if err != nil {
			return nil, CommitCost{}, err
		}
		claim.args[1] = pgUUID(uuid.New())
		for _, s := range []struct {
			name string
			sql  string
			args []any
		}{
			{fmt.Sprintf("relay: settle (DELETE %d published)", batch), settle.sql, settle.args},
			{fmt.Sprintf("relay: claim %d (UPDATE ... lease)", batch), claim.sql, claim.args},
			{fmt.Sprintf("ceiling: DELETE %d ... RETURNING", batch), fmt.Sprintf(ceilingSQL, quote(opts.Schema)+".outbox"), []any{batch}},
		} {
			x, err := e.explain(ctx, s.sql, s.args)
			if err != nil {
				return nil, CommitCost{}, fmt.Errorf("explain %s: %w", s.name, err)
			}
			x.Name, x.Rows = s.name, batch
			out = append(out, x)
		}
	}
	// The claim again, half-way through a drain by the relay's own
	// statements: the index entries of rows already claimed and deleted are
	// still in the pending index until vacuum removes them, and each claim
	// walks past them.
	token := uuid.New()
	var batch []outbox.Message
	for drained := 0; drained < e.opts.Backlog/2; drained += len(batch) {
		next := uuid.New()
		batch, err = store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: ids(batch)},
			outboxdriver.Claim{Limit: 1000, Lease: 30 * time.Second, Token: next})
		if err != nil {
			return nil, CommitCost{}, err
		}
		token = next
		if len(batch) == 0 {
			break
		}
	}
	capture.reset()
	if _, err := store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Published: ids(batch)},
		outboxdriver.Claim{Limit: 1000, Lease: 30 * time.Second, Token: uuid.New()}); err != nil {
		return nil, CommitCost{}, err
	}
	if stmts := capture.taken(); len(stmts) == 2 {
		claim := stmts[1]
		claim.args[1] = pgUUID(uuid.New())
		x, err := e.explain(ctx, claim.sql, claim.args)
		if err != nil {
			return nil, CommitCost{}, fmt.Errorf("explain the claim half-way: %w", err)
		}
		x.Name, x.Rows = "relay: claim 1000, half-way through a drain", 1000
		out = append(out, x)
		x, err = e.explain(ctx, fmt.Sprintf(ceilingSQL, quote(opts.Schema)+".outbox"), []any{1000})
		if err != nil {
			return nil, CommitCost{}, fmt.Errorf("explain the ceiling half-way: %w", err)
		}
		x.Name, x.Rows = "ceiling: DELETE 1000, same point", 1000
		out = append(out, x)
	}
	cc, err := e.commitCost(ctx, opts.Schema)
	return out, cc, err
}

// settleArgs are the arguments of the relay's delete of the published
// messages ids, leased to token: by address (ctid, as outboxpg deletes the
// rows its claims leased) with the table's file node.
func (e *env) settleArgs(ctx context.Context, table string, token uuid.UUID, ids []uuid.UUID) ([]any, error) {
	var tids []pgtype.TID
	var filenode uint32
	err := e.admin.QueryRow(ctx, `SELECT array_agg(ctid), pg_relation_filenode($3::regclass) FROM `+table+`
		WHERE id = ANY($1) AND lease_token = $2`, pgUUIDs(ids), pgUUID(token), table).Scan(&tids, &filenode)
	return []any{tids, pgUUID(token), filenode}, err
}

var executionTimeRE = regexp.MustCompile(`Execution Time: ([0-9.]+) ms`)

func (e *env) explain(ctx context.Context, sql string, args []any) (Explain, error) {
	var x Explain
	tx, err := e.admin.Begin(ctx)
	if err != nil {
		return x, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var before, after int64
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'`).Scan(&before); err != nil {
		return x, err
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, WAL) `+sql, args...)
	if err != nil {
		return x, err
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return x, err
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn() - '0/0'`).Scan(&after); err != nil {
		return x, err
	}
	x.Plan = strings.Join(lines, "\n")
	x.WALBytes = after - before
	if m := executionTimeRE.FindStringSubmatch(x.Plan); m != nil {
		ms, _ := strconv.ParseFloat(m[1], 64)
		x.Execution = time.Duration(ms * float64(time.Millisecond))
	}
	return x, nil
}

// CommitCost is the p50 of a one-row write transaction with the WAL flush at
// commit (synchronous_commit on, the default) and without it: their
// difference is what each batch's commit pays for durability.
type CommitCost struct {
	On, Off time.Duration
	N       int
}

func (e *env) commitCost(ctx context.Context, schema string) (CommitCost, error) {
	cc := CommitCost{N: 500}
	if _, err := e.admin.Exec(ctx, `CREATE TABLE `+quote(schema)+`.flush (id bigserial PRIMARY KEY, at timestamptz)`); err != nil {
		return cc, err
	}
	conn, err := e.admin.Acquire(ctx)
	if err != nil {
		return cc, err
	}
	defer conn.Release()
	var on, off []time.Duration
	for i := range cc.N + 10 {
		for _, sync := range []bool{true, false} {
			start := time.Now()
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if !sync {
					if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, `INSERT INTO `+quote(schema)+`.flush (at) VALUES (now())`)
				return err
			})
			if err != nil {
				return cc, err
			}
			if i < 10 { // warm-up
				continue
			}
			if sync {
				on = append(on, time.Since(start))
			} else {
				off = append(off, time.Since(start))
			}
		}
	}
	slices.Sort(on)
	slices.Sort(off)
	cc.On, cc.Off = percentile(on, 0.5), percentile(off, 0.5)
	return cc, nil
}

// sqlCapture is a pgx tracer that keeps the statements of pipelined batches.
type sqlCapture struct {
	mu    sync.Mutex
	stmts []capturedSQL
}

type capturedSQL struct {
	sql  string
	args []any
}

func (c *sqlCapture) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (c *sqlCapture) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *sqlCapture) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *sqlCapture) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stmts = append(c.stmts, capturedSQL{sql: d.SQL, args: slices.Clone(d.Args)})
}
func (c *sqlCapture) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (c *sqlCapture) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stmts = nil
}

func (c *sqlCapture) taken() []capturedSQL {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.stmts)
}

func ids(msgs []outbox.Message) []uuid.UUID {
	out := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
