package outboxpg

// The claim in key order. Its specification, what it may return, its
// invariants and why each step keeps them, is docs/design/key-order-claim.md
// (here "spec"): each CTE carries the name of its section there. Why the
// statement has this shape rather than a simpler one is measured in
// docs/benchmarks.md ("Why the key-order claim is shaped this way").

// keysPerClaim is about how many keys a claim in key order takes when their
// runs are long (spec §1, §4.5): each key's first share of the batch is at
// most the batch size divided by it. Fewer keys per claim would leave a
// key's run for the next claim sooner; more would leave no keys for a second
// worker when there are a few dozen hot keys.
const keysPerClaim = 16

// runAfterBelow is the part of a key's run that follows a row already taken
// (alias.key, alias.seq): its next pending messages in seq order, at most
// limit of them, numbered from 1 (r), with ok true for as long as they are
// due and not leased (a running bool_and: the first that is not ends the
// run, and every row after it is not ok either). below ends the run at the
// dead floor (spec §8).
func runAfterBelow(alias, limit, below string) string {
	return `
		SELECT e.ctid, e.seq, row_number() OVER w AS r,
			bool_and(e.available_at <= now() AND (e.locked_until IS NULL OR e.locked_until <= now())) OVER w AS ok
		FROM (SELECT ctid, seq, available_at, locked_until FROM {t} AS e
			WHERE e.status = 'pending' AND e.key <> '' AND e.key = ` + alias + `.key AND e.seq > ` + alias + `.seq` + below + `
			ORDER BY e.seq LIMIT ` + limit + `) AS e
		WINDOW w AS (ORDER BY e.seq)`
}

// keyOrderClaim is the claim in key order ($1 lease in microseconds, $2
// token, $3 limit; with TransactionLeases, $1 limit). It leases runs (spec
// §2). Three points of PostgreSQL the spec does not need:
//
//   - due_head looks each candidate up by its address with a LIMIT 1 that can
//     never cut anything: it keeps the planner from folding the lookup into a
//     join it may turn around, which on a table without statistics tested
//     every pending row for being a head
//     (TestKeyOrderClaimCostIsBoundedWithoutStatistics).
//   - gap and missed_head use NOT IN, which PostgreSQL 14 and later run as a
//     hash lookup whatever the generic plan's row estimates.
//   - The result has no order: the store sorts it (sortRuns, spec §4.13).
var keyOrderClaim = `
WITH RECURSIVE walk (key, ctid, n) AS (
	-- spec §4.1 walk: one probe per key finds its head
	(SELECT e.key, e.ctid, 1 FROM {t} AS e WHERE e.status = 'pending' AND e.key <> '' ORDER BY e.key, e.seq LIMIT 1)
	UNION ALL
	SELECT e.key, e.ctid, w.n + 1 FROM walk AS w
	CROSS JOIN LATERAL (SELECT e.key, e.ctid FROM {t} AS e
		WHERE e.status = 'pending' AND e.key <> '' AND e.key > w.key
		ORDER BY e.key, e.seq LIMIT 1) AS e
	WHERE w.n < {walk_limit}
), candidate (ctid, prio) AS (
	-- spec §4.3 candidate: the walk and the two windows (§4.2) take turns
	SELECT ctid, 3 * n + 2 FROM walk
	UNION ALL
	SELECT ctid, 3 * row_number() OVER (ORDER BY available_at, id) FROM ({oldest_window}) AS oldest
	WHERE oldest.key = '' OR oldest.key NOT IN (SELECT key FROM walk)
	UNION ALL
	SELECT ctid, 3 * row_number() OVER (ORDER BY available_at DESC, id DESC) + 1 FROM ({newest_window}) AS newest
	WHERE newest.key = '' OR newest.key NOT IN (SELECT key FROM walk)
), due_head AS MATERIALIZED (
	-- spec §4.4 due_head: candidates due as heads, free ones first, in turn order
	SELECT array_agg(d.ctid ORDER BY d.turn) AS ctids
	FROM (SELECT o.ctid, o.free, CASE WHEN c.prio % 3 = 2
			THEN 3 * row_number() OVER (PARTITION BY c.prio % 3 = 2 ORDER BY o.available_at, c.prio) + 2
			ELSE c.prio END AS turn
		FROM (SELECT ctid, min(prio) AS prio FROM candidate WHERE ctid IS NOT NULL GROUP BY ctid) AS c
		CROSS JOIN LATERAL (SELECT o.ctid, o.available_at, true{free_o} AS free FROM {t} AS o
			WHERE o.ctid = c.ctid AND o.status = 'pending' AND o.available_at <= now()
				AND (o.locked_until IS NULL OR o.locked_until <= now())
				AND (c.prio % 3 = 2 OR {is_head}){not_behind_dead}
			LIMIT 1) AS o
		ORDER BY NOT o.free, turn
		LIMIT {limit}) AS d
), take AS MATERIALIZED (
	-- spec §4.5 take: lock each head in turn, read its run up to its share, stop at limit rows
	SELECT d.n, h.ctid AS head, h.id, h.key, h.seq AS head_seq, h.dead_floor, f.ctid, f.seq, f.r, f.ok
	FROM unnest((SELECT ctids FROM due_head)) WITH ORDINALITY AS d(ctid, n)
	CROSS JOIN LATERAL (SELECT o.ctid, o.id, o.key, o.seq, {dead_floor} AS dead_floor FROM {t} AS o
		WHERE o.ctid = d.ctid AND o.status = 'pending' AND o.available_at <= now()
			AND (o.locked_until IS NULL OR o.locked_until <= now())
		LIMIT 1
		FOR UPDATE SKIP LOCKED) AS h
	CROSS JOIN LATERAL (
		SELECT NULL::tid AS ctid, NULL::bigint AS seq, 1::bigint AS r, true AS ok
		UNION ALL
		SELECT y.ctid, y.seq, 1 + y.r, y.ok FROM ({run_after_h}) AS y) AS f
	LIMIT {limit}
), taken_head AS (
	-- spec §4.11: the heads take locked, to lease
	SELECT head AS ctid, id, key, head_seq AS seq, n AS prio FROM take WHERE r = 1
), room AS (
	-- spec §4.6 top_up: the places take left
	SELECT {limit} - (SELECT count(*) FROM take) AS places
), full_share AS (
	-- spec §4.6 top_up: the keys whose run filled its share in take, every row ok
	SELECT t.n, max(t.key) AS key, COALESCE(max(t.seq), max(t.head_seq)) AS seq, max(t.dead_floor) AS dead_floor, count(t.ctid) AS taken
	FROM take AS t
	WHERE (SELECT places FROM room) > 0
	GROUP BY t.n
	HAVING max(t.key) <> '' AND count(t.ctid) = {limit} / {keys_per_claim} AND bool_and(t.ok)
), share AS (
	-- spec §4.6 top_up: the places left, shared equally
	SELECT r.places, (r.places + k.keys - 1) / GREATEST(k.keys, 1) AS each
	FROM room AS r CROSS JOIN (SELECT count(*) AS keys FROM full_share) AS k
), top_up AS (
	-- spec §4.6 top_up: each full run goes on from where take stopped
	SELECT c.key, c.n, c.dead_floor, f.ctid, f.seq, c.taken + 1 + f.r AS r FROM full_share AS c CROSS JOIN share AS s
	CROSS JOIN LATERAL ({run_after_c}) AS f
	WHERE f.ok
), full_top_up AS (
	-- spec §4.7 second_top_up: the runs that took their whole top-up share
	SELECT m.key, max(m.n) AS n, max(m.seq) AS seq, max(m.dead_floor) AS dead_floor, max(m.r) AS r FROM top_up AS m
	GROUP BY m.key HAVING count(*) = (SELECT each FROM share)
), share_left AS (
	-- spec §4.7 second_top_up: what the shorter runs left, shared equally
	SELECT GREATEST(0, (s.places - (SELECT count(*) FROM top_up) + k.keys - 1) / GREATEST(k.keys, 1)) AS each
	FROM share AS s CROSS JOIN (SELECT count(*) AS keys FROM full_top_up) AS k
), second_top_up AS (
	-- spec §4.7 second_top_up: those runs go on once more
	SELECT g.key, g.n, f.ctid, g.r + f.r AS r FROM full_top_up AS g CROSS JOIN share_left AS s
	CROSS JOIN LATERAL ({run_after_g}) AS f
	WHERE s.each > 0 AND f.ok
), wanted AS (
	-- spec §4.8 wanted: run rows to lock; top-ups ranked by place in run, so a cut keeps prefixes
	SELECT key, ctid, r FROM take WHERE ctid IS NOT NULL AND ok
	UNION ALL
	(SELECT key, ctid, r FROM (SELECT key, n, ctid, r FROM top_up UNION ALL SELECT key, n, ctid, r FROM second_top_up) AS m
		ORDER BY r, n LIMIT (SELECT places FROM room))
), locked_run AS MATERIALIZED (
	-- spec §4.9 locked_run: lock by address, rechecked on the newest version
	SELECT o.ctid FROM {t} AS o
	WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM wanted))
		AND o.status = 'pending' AND o.available_at <= now()
		AND (o.locked_until IS NULL OR o.locked_until <= now())
	FOR UPDATE SKIP LOCKED
), gap AS (
	-- spec §4.10 gap: a run ends before its first row not locked
	SELECT w.key, min(w.r) AS r FROM wanted AS w
	WHERE w.ctid NOT IN (SELECT ctid FROM locked_run)
	GROUP BY w.key
), leased_head AS (
	-- spec §4.11 leased_head
	{lease} t.ctid = ANY(ARRAY(SELECT ctid FROM taken_head))
	RETURNING {message_columns}, t.seq, t.ctid{overtaken}
), missed_head AS (
	-- spec §4.11 missed_head: locked but not leased (a new version), so its run stays
	SELECT key FROM taken_head WHERE key <> '' AND id NOT IN (SELECT id FROM leased_head)
), leased_run AS (
	-- spec §4.12 leased_run: each run before its gap, if its head was leased
	{lease} t.ctid = ANY(ARRAY(
		SELECT w.ctid FROM wanted AS w LEFT JOIN gap AS g ON g.key = w.key
		WHERE (g.r IS NULL OR w.r < g.r) AND w.key NOT IN (SELECT key FROM missed_head)))
	RETURNING {message_columns}, t.seq, t.ctid{overtaken}
)
SELECT {message_columns}, {claimed_columns} FROM (
	SELECT * FROM leased_head UNION ALL SELECT * FROM leased_run) AS leased`
