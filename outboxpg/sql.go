package outboxpg

import (
	"strconv"
	"strings"

	"github.com/go-outbox/outbox/outboxdriver"
)

// statements holds every SQL text of a table, built once from validated names.
// The pgx Store and the database/sql SQLWriter share it, so both write rows the
// same way.
type statements struct {
	insert          string // $1..$7: ids, topics, keys, payloads, headers, created_ats, available_ats
	insertNotify    string // as insert, $8: channel
	insertOne       string // as insert, one message: $1..$7 are scalars
	insertOneNotify string // as insertOne, $8: channel

	settlePublished string // $1 ids, $2 token
	deleteAt        string // $1 ctids, $2 token, $3 the table's file node at the claim, $4 the ids settled at those addresses
	settleKept      string // $1 ids, $2 token
	settleRetry     string // $1 ids, $2 delays in microseconds, $3 errors, $4 attempts to count (0 or 1), $5 token
	postponeHeld    string // $1 ids of retried messages; key order only
	settleDead      string // $1 ids, $2 errors, $3 token
	claim           string // $1 lease in microseconds, $2 token, $3 limit (TransactionLeases: $1 limit); returns claimedColumns
	putBack         string // TransactionLeases: rows a held claim deleted, back with their outcome (see putBackArgs)
	release         string // $1 ids, $2 token
	nextDue         string
	purge           string // $1 age in microseconds, $2 limit

	stats       string
	get         string // $1 id
	listDead    string // $1 after, $2 limit
	retryDead   string // $1 ids
	retryAll    string
	discardDead string // $1 ids
}

// messageColumns are scanned by messageScanner, in this order.
const messageColumns = `id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at`

// claimedColumns are what a claim returns after messageColumns: where each
// leased row is and the table's file node (see addressBook), read once, and
// the insert order (seq), by which key order sorts each key's run.
const claimedColumns = `ctid, (SELECT pg_relation_filenode('{t}')), seq`

// leaseMode says how a store's claims hold their rows (Options.TransactionLeases).
type leaseMode bool

const (
	leaseColumns     leaseMode = false // locked_until and lease_token
	leaseTransaction leaseMode = true  // deleted in a transaction held open
)

func newStatements(n names, o Options) statements {
	lease := leaseMode(o.TransactionLeases)
	return buildStatements(n, o.OrderByKey, o.deadHoldsKey(), lease, lease == leaseTransaction)
}

// leasedClaimBesideHeld is the claim that writes a lease on a table where
// other claims hold their rows in transactions: it passes over their rows as
// theirs do (see holdPlaces).
func leasedClaimBesideHeld(n names, o Options) string {
	return buildStatements(n, o.OrderByKey, o.deadHoldsKey(), leaseColumns, true).claim
}

// buildStatements builds the statements; deadHolds says whether a dead
// message holds the rest of its key in key order, othersHold whether claims
// may hold rows of the table in open transactions.
func buildStatements(n names, orderByKey, deadHolds bool, lease leaseMode, othersHold bool) statements {
	// In key order, a message is due only as the head of its key: no
	// earlier message of the key (by seq, the insert order, see migration
	// 3) is pending, whether leased, retrying or scheduled later. The key
	// index answers that with one probe; its predicate is repeated
	// (e.key <> '') so the planner may use it. Under READ COMMITTED two
	// relays cannot both pass a key's head: the head stays pending, hence
	// blocks the next message, until the transaction that publishes or
	// kills it commits.
	isHead, headOfKey := "", ""
	if orderByKey {
		// The probe reads the key index backwards from the message: a
		// message held behind its head meets its pending predecessor
		// first. Read forwards, it would step over every entry the key's
		// published messages left in the index until vacuum removes them:
		// with a hot key, tens of thousands per check.
		isHead = `(o.key = '' OR (
			SELECT e.seq FROM ` + n.qTable + ` AS e
			WHERE e.key = o.key AND e.key <> '' AND e.status = 'pending' AND e.seq < o.seq
			ORDER BY e.seq DESC LIMIT 1) IS NULL)`
		headOfKey = "\n\t\tAND " + isHead
	}
	// Unless the store skips dead messages, nor is a message due behind a
	// dead one of its key (notBehindDead, for a candidate o), and a run
	// ends before the first dead message after its head (the head's
	// dead_floor, read by take and handed on; runAfter). The key dead
	// index (migration 5) answers each with one probe.
	notBehindDead, deadFloor, runBelowFloor := "", "NULL::bigint", func(string) string { return "" }
	if orderByKey && deadHolds {
		notBehindDead = `
		AND (o.key = '' OR NOT EXISTS (SELECT FROM {t} AS d
			WHERE d.key = o.key AND d.key <> '' AND d.status = 'dead' AND d.seq < o.seq))`
		deadFloor = `(SELECT min(d.seq) FROM {t} AS d WHERE d.key = o.key AND d.key <> '' AND d.status = 'dead' AND d.seq > o.seq)`
		runBelowFloor = func(alias string) string {
			return " AND (" + alias + ".dead_floor IS NULL OR e.seq < " + alias + ".dead_floor)"
		}
	}
	runAfter := func(alias, limit string) string { return runAfterBelow(alias, limit, runBelowFloor(alias)) }
	// A claim's rows are leased by writing the lease into them ($1 lease in
	// microseconds, $2 token, $3 limit), or deleted by a transaction that
	// stays open until they are published ($1 limit; see heldClaims).
	leaseRows, limit := "UPDATE "+n.qTable+" AS t\nSET locked_until = now() + $1::bigint * interval '1 microsecond', lease_token = $2\nWHERE", "$3"
	if lease == leaseTransaction {
		leaseRows, limit = "DELETE FROM "+n.qTable+" AS t WHERE", "$1"
	}
	// With transaction leases, the rows of open claims look pending, due
	// and free to every other transaction until the claim commits, and
	// FOR UPDATE SKIP LOCKED finds out only when it tries to lock them.
	// Lists cut at the batch size before locking (the key-order claim's
	// candidates) and the idle probe must pass over them by themselves,
	// or a second worker's claim finds only the first one's rows and comes
	// back empty while work is free, and idle workers are sent to claim at
	// every poll (TestConcurrentTransactionLeaseClaimsEachFindFreeWork).
	// free(alias) tests that a row's xmax is no transaction in progress
	// at the statement's snapshot: a row another transaction deletes,
	// updates or locks carries that transaction's xid in xmax, and a row
	// never touched carries 0. In progress are the xids the snapshot lists
	// (pg_snapshot_xip) and those from its xmax on; xmax is 32 bits, so
	// the snapshot's xids are taken modulo 2^32 and "from its xmax on" is
	// the half of the xid circle ahead of it, as PostgreSQL compares xids.
	// A multixact in xmax (shared row locks, which the relay never takes)
	// may by chance look like a running xid: such a row is then put last,
	// never taken wrongly, since the claim still locks what it takes.
	free := func(alias string) string {
		if !othersHold {
			return ""
		}
		m := alias + "xmax::text::bigint"
		return " AND NOT (" + m + " = ANY(ARRAY(SELECT x::text::bigint % 4294967296 FROM pg_snapshot_xip(pg_current_snapshot()) AS x))" +
			" OR (" + m + " <> 0 AND (" + m + " - (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint % 4294967296) + 4294967296) % 4294967296 < 2147483648))"
	}
	// The key-order claim's windows: the oldest and the newest due rows.
	// With transaction leases, the first rows free of open claims, and the
	// first rows whatever holds them: the heuristic above may take a row
	// for held that is not, and such a row must still come to a claim
	// (due_head puts the free ones first).
	window := func(order string) string {
		w := func(free string) string {
			return `(SELECT ctid, key, available_at, id FROM {t}
		WHERE status = 'pending' AND available_at <= now() AND (locked_until IS NULL OR locked_until <= now())` + free + `
		ORDER BY ` + order + `
		LIMIT least({limit}, {window}))`
		}
		if !othersHold {
			return w("")
		}
		return w(free("")) + "\n\tUNION\n\t" + w("")
	}
	r := strings.NewReplacer("{t}", n.qTable, "{head_of_key}", headOfKey, "{is_head}", isHead, "{lease}", leaseRows, "{limit}", limit,
		"{oldest_window}", window("available_at, id"), "{newest_window}", window("available_at DESC, id DESC"), "{free_o}", free("o."),
		"{not_behind_dead}", notBehindDead, "{dead_floor}", deadFloor, "{run_after_h}", runAfter("h", "{limit} / {keys_per_claim}"),
		"{run_after_c}", runAfter("c", "s.each"), "{run_after_g}", runAfter("g", "s.each"),
		"{walk_limit}", strconv.Itoa(outboxdriver.KeyWalkLimit), "{window}", strconv.Itoa(outboxdriver.KeyWindow),
		"{message_columns}", messageColumns, "{claimed_columns}", strings.ReplaceAll(claimedColumns, "{t}", n.qTable), "{keys_per_claim}", strconv.Itoa(keysPerClaim))
	// Twice: the windows hold placeholders of their own.
	sql := func(s string) string { return r.Replace(r.Replace(strings.TrimSpace(s))) }

	// laterDue is the wait in microseconds until the earliest due row
	// whose lease ends or the first message due later, NULL if none.
	const laterDue = `ceil(EXTRACT(EPOCH FROM LEAST(
		(SELECT min(locked_until) FROM {t} WHERE status = 'pending' AND available_at <= now() AND locked_until > now()),
		(SELECT min(available_at) FROM {t} WHERE status = 'pending' AND available_at > now())
	) - now()) * 1000000)::bigint`

	claim := sql(`
WITH c AS MATERIALIZED (
	SELECT ctid FROM {t} AS o
	WHERE status = 'pending' AND available_at <= now()
		AND (locked_until IS NULL OR locked_until <= now())
	ORDER BY available_at, id
	LIMIT {limit}
	FOR UPDATE SKIP LOCKED
)
{lease} t.ctid = ANY(ARRAY(SELECT ctid FROM c))
RETURNING {message_columns}, t.{claimed_columns}`)
	if orderByKey {
		claim = sql(keyOrderClaim)
	}

	insert := `
INSERT INTO {t} (id, topic, key, payload, headers, created_at, available_at)
SELECT m.id, m.topic, m.key, m.payload, m.headers::jsonb, COALESCE(m.created_at, now()), COALESCE(m.available_at, now())
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[], $7::timestamptz[])
	AS m(id, topic, key, payload, headers, created_at, available_at)`

	// One message, the commonest write, goes as plain values: the same row
	// without encoding seven one-element arrays and unnesting them.
	insertOne := `
INSERT INTO {t} (id, topic, key, payload, headers, created_at, available_at)
VALUES ($1::uuid, $2::text, $3::text, $4::bytea, $5::text::jsonb, COALESCE($6::timestamptz, now()), COALESCE($7::timestamptz, now()))`

	// A data-modifying CTE runs to completion even though the outer query
	// ignores it, so inserting and notifying stay one statement. The
	// notification is queued and only delivered if the transaction commits.
	withNotify := func(insert string) string {
		return sql(`WITH ins AS (` + insert + `
)
SELECT pg_notify($8, '')`)
	}

	// A due message that no lease holds makes the wait 0, and EXISTS
	// stops at the first one. Otherwise every due row is in flight, and
	// there are few of them (batch size times workers per relay): the
	// earliest lease end among them competes with the first message due
	// later, read from the first entry of the pending index. The
	// subqueries run only when CASE needs them.
	nextDue := sql(`
SELECT CASE
	WHEN EXISTS (
		SELECT FROM {t} AS o WHERE status = 'pending' AND available_at <= now()
			AND (locked_until IS NULL OR locked_until <= now()){free_o}
	) THEN 0
	ELSE ` + laterDue + `
END`)
	if orderByKey {
		// In key order only a head is due, and the rows held back behind
		// heads in flight may be most of the table: looking for a head
		// among all of them cost a second or more per probe with 50,000
		// behind one hot key. So the probe looks among the first
		// KeyWindow due rows only, as the claim's window does. If the
		// window is full and holds no head, it answers "due now" all the
		// same: the claim that follows walks the keys and finds out, once
		// per poll at most.
		nextDue = sql(`
WITH due AS MATERIALIZED (
	SELECT o.key, o.seq FROM {t} AS o
	WHERE status = 'pending' AND available_at <= now()
		AND (locked_until IS NULL OR locked_until <= now()){free_o}
	ORDER BY available_at, id
	LIMIT {window}
)
SELECT CASE
	WHEN (SELECT count(*) FROM due) = {window} THEN 0
	WHEN EXISTS (SELECT FROM due AS o WHERE true{head_of_key}{not_behind_dead}) THEN 0
	ELSE ` + laterDue + `
END`)
	}

	return statements{
		insert:          sql(insert),
		insertNotify:    withNotify(insert),
		insertOne:       sql(insertOne),
		insertOneNotify: withNotify(insertOne),

		// The rows a held claim deleted come back as they were, with their
		// place in the queue and in their key (seq), but for what their
		// outcome changes: attempts, error, status, and the due time when
		// a delay is given (-1 keeps it). Times count from the statement:
		// the transaction began at the claim.
		putBack: sql(`
INSERT INTO {t} (id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at, seq)
OVERRIDING SYSTEM VALUE
SELECT m.id, m.topic, m.key, m.payload, m.headers::jsonb, m.created_at,
	CASE WHEN m.delay_us < 0 THEN m.available_at ELSE statement_timestamp() + m.delay_us * interval '1 microsecond' END,
	m.attempts, m.last_error, m.status, CASE WHEN m.status = 'published' THEN statement_timestamp() END, m.seq
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[], $7::timestamptz[],
		$8::int[], $9::text[], $10::text[], $11::bigint[], $12::bigint[])
	AS m(id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, seq, delay_us)`),
		settlePublished: sql(`DELETE FROM {t} WHERE id = ANY($1::uuid[]) AND lease_token = $2`),
		// The file node condition has no column in it: PostgreSQL checks it
		// once, before the scan. The ids are checked too (see addressBook):
		// a row of the claim that an outside UPDATE moved may sit at the
		// address of another, with the token. IN (SELECT unnest(...)) is
		// a hash semi-join whatever the plan; = ANY($4) compared every row
		// with every id in generic plans (twice the delete's time for 1,000).
		deleteAt: sql(`
DELETE FROM {t} WHERE ctid = ANY($1::tid[]) AND lease_token = $2
	AND pg_relation_filenode('{t}') = $3::oid
	AND id IN (SELECT unnest($4::uuid[]))`),
		settleKept: sql(`
UPDATE {t} SET status = 'published', published_at = now(), lease_token = NULL, locked_until = NULL
WHERE id = ANY($1::uuid[]) AND lease_token = $2`),
		settleRetry: sql(`
UPDATE {t} AS t
SET attempts = t.attempts + r.counted,
	available_at = now() + r.delay_us * interval '1 microsecond',
	last_error = r.err,
	lease_token = NULL,
	locked_until = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[]) AS r(id, delay_us, err, counted)
WHERE t.id = r.id AND t.lease_token = $5`),
		// In key order, a retried head takes the messages held behind it
		// back in the queue with it: left at the front, they would fill
		// the first due rows a claim looks at (see the claim), and messages
		// without a key or of keys beyond the walk would wait behind them
		// until the head succeeds. Each retry moves them again, only as
		// far as the head's next attempt.
		//
		// It runs after the release of the rest of the head's run, and
		// moves no row under a live lease; a lease that ran out is ended
		// (the token cleared), so that no row moved by it keeps a token:
		// see addressBook.
		postponeHeld: sql(`
UPDATE {t} AS f SET available_at = h.available_at, lease_token = NULL, locked_until = NULL
FROM {t} AS h
WHERE h.id = ANY($1::uuid[]) AND h.status = 'pending' AND h.key <> ''
	AND f.key = h.key AND f.key <> '' AND f.status = 'pending' AND f.seq > h.seq
	AND f.available_at < h.available_at
	AND (f.locked_until IS NULL OR f.locked_until <= now())`),
		settleDead: sql(`
UPDATE {t} AS t
SET status = 'dead', attempts = t.attempts + 1, last_error = d.err, lease_token = NULL, locked_until = NULL
FROM unnest($1::uuid[], $2::text[]) AS d(id, err)
WHERE t.id = d.id AND t.lease_token = $3`),
		// A claim leases rows by setting locked_until and lease_token, two
		// columns no index covers, so PostgreSQL can update the rows in place
		// (HOT, see migration 2) and a crashed relay's messages are due again
		// when their leases run out, with no clean-up. available_at keeps the
		// due time, so a message whose lease ran out keeps its place in the
		// queue. MATERIALIZED makes the locking subquery run exactly once
		// whatever plan the UPDATE gets. The UPDATE finds the locked rows by
		// their physical address (a TID scan, no index descent per row): a
		// row this transaction holds locked cannot be moved by anyone else
		// before the UPDATE. FOR UPDATE rechecks the WHERE clause, lease
		// included, on the newest version of a row before locking it, so
		// no row is leased twice. If that newest version was committed after
		// the statement began (a release, say), the TID scan does not see it
		// and skips the row: the batch is one short and the row stays free
		// for the next claim. RETURNING has no order: the caller sorts.
		claim: claim,
		release: sql(`
UPDATE {t} SET locked_until = NULL, lease_token = NULL
WHERE id = ANY($1::uuid[]) AND lease_token = $2 AND status = 'pending'`),
		nextDue: nextDue,
		// = ANY(ARRAY(...)) runs the bounded subquery once and deletes by
		// primary key; IN (...) may be planned as a join over the whole table.
		purge: sql(`
DELETE FROM {t} WHERE id = ANY(ARRAY(
	SELECT id FROM {t}
	WHERE status = 'published' AND published_at < now() - $1::bigint * interval '1 microsecond'
	ORDER BY published_at
	LIMIT $2
)) AND status = 'published'`),

		// One query, but a subquery per count so each reads its partial
		// index rather than the whole table: with retention on, published
		// rows may outnumber the others by far, and metrics call this often.
		stats: sql(`
SELECT
	(SELECT count(*) FROM {t} WHERE status = 'pending'),
	(SELECT count(*) FROM {t} WHERE status = 'pending' AND lease_token IS NOT NULL AND locked_until > now()),
	(SELECT count(*) FROM {t} WHERE status = 'dead'),
	(SELECT count(*) FROM {t} WHERE status = 'published'),
	(SELECT COALESCE(GREATEST(0, floor(EXTRACT(EPOCH FROM now() - min(created_at)) * 1000000)), 0)::bigint
		FROM {t} WHERE status = 'pending'),
	(SELECT count(*) FROM {t} WHERE status = 'published' AND published_at > now() - interval '1 minute'),
	(SELECT count(*) FROM (SELECT key, min(seq) AS first_dead FROM {t} WHERE status = 'dead' AND key <> '' GROUP BY key) AS d
		JOIN {t} AS p ON p.key = d.key AND p.key <> '' AND p.status = 'pending' AND p.seq > d.first_dead)`),
		get:      sql(`SELECT ` + messageColumns + ` FROM {t} WHERE id = $1`),
		listDead: sql(`SELECT ` + messageColumns + ` FROM {t} WHERE status = 'dead' AND id > $1 ORDER BY id LIMIT $2`),
		retryDead: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), lease_token = NULL, locked_until = NULL
WHERE status = 'dead' AND id = ANY($1::uuid[])`),
		retryAll: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), lease_token = NULL, locked_until = NULL
WHERE status = 'dead'`),
		discardDead: sql(`DELETE FROM {t} WHERE status = 'dead' AND id = ANY($1::uuid[])`),
	}
}

// keysPerClaim is about how many keys a claim in key order takes when their
// runs are long: each key's first share of the batch is at most the batch
// size divided by it. Fewer keys per claim would leave a key's run for the
// next claim sooner; more would leave no keys for a second worker with a
// few dozen hot keys (measured: 64 keys drained by two workers, each claim
// taking every key, ran at the speed of one).
const keysPerClaim = 16

// runAfterBelow is the part of a key's run that follows a row already taken
// (alias.key, alias.seq): its next pending messages in seq order, at most
// limit of them, numbered from 1 (r), with ok true for as long as they are
// due and not leased (a running bool_and: the first that is not ends the
// run, and every row after it is not ok either).
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
// token, $3 limit). It leases runs: the head of a key (no earlier message of
// the key pending) when it is due and not leased, then the key's next
// messages in seq order for as long as they are due and not leased, so that
// a hot key is not limited to one message per claim.
//
// Heads come from three places, since scanning the pending index in due
// order would read past every message held back behind its key's head (with
// few keys and a deep backlog, nearly the whole table per claim): a walk of
// the key index from key to key (a loose index scan: one probe per key, for
// the first entry after the last key, which is the next key's head; at most
// outboxdriver.KeyWalkLimit keys, in key order), the oldest due
// rows and the newest due rows (outboxdriver.KeyWindow of each: messages
// without a key, and heads of keys beyond the walk, whether they were
// written long ago or just now). The three lists take turns for the batch's
// places (prio), so none of them waits for the others to run dry; the
// walk's heads take their turns by due time, not in key order, so that keys
// late in key order do not wait behind early ones that keep receiving. The
// windows' rows of keys the walk visited are dropped before any head check:
// the walk found those keys' heads, and with a few hot keys nearly every row
// of the windows is one of their followers.
//
// A claim takes only as many heads as it needs to fill the batch, so that
// other workers find keys of their own (take): it goes down the heads in
// turn order, one at a time, locking each (FOR UPDATE SKIP LOCKED, as the
// plain claim does) and reading the run of each one it locked (its key's
// pending messages after it, at most the batch size divided by
// keysPerClaim of them), in a nested loop that a LIMIT stops once it holds
// the batch size of rows. With long runs a claim holds about keysPerClaim
// keys; with short ones, as many as fill the batch; below keysPerClaim
// messages per batch, one head per place, as many as fit. What take read
// is the claim, each run read once, unless take ran out of heads before it
// filled the batch (few keys, or short runs): then the places left are
// shared among the keys whose runs it read to that cap, all due and free
// (capped), and each of their runs goes on from where take stopped (more).
// What the runs that end within their share leave goes, in a second pass,
// to the runs that took all of theirs (refill, more2), so that a few keys
// of unequal lengths still fill the batch when they can.
//
// Heads other claims hold are passed over for the next ones, however many
// there are, and their runs are not read. (Held in a transaction, a head
// stays among the due heads while it is published: with a few workers each
// holding a dozen, a claim that counted runs before locking read the runs
// of the other workers' heads, found them locked, and read its own runs
// again; before that, it came back empty.) The nested loop keeps the turn
// order; the order only decides which keys go first. Only the claim that
// holds a head looks at its key's next messages, and a head stays pending
// until the transaction that publishes it commits, so no two claims hold
// messages of one key.
//
// The rows of more and more2 are ranked by their place in their run first
// (r), so a cut at the places left leaves each run a prefix. A message of a run that
// cannot be locked or no longer qualifies ends the run there (gap): what
// follows it in the key waits for the next claim. Every message of a run
// before its gap was locked, so the lease needs no join with the locked
// rows. A run is leased only if its head was (missed_head): a head released
// and committed by another worker after this statement's snapshot is locked
// in its new version, which the lease's TID scan does not see, and its
// followers must not go out without it.
//
// due_head looks up each candidate by its address (a TID scan) to see that
// it is due and not leased, and tests the windows' candidates for being
// heads: the walk's are heads by the way it found them (the first pending
// message of their key in the statement's snapshot, which the test reads
// too), so testing them again cost a probe per key for nothing. For the
// same reason take does not test the heads again when it locks them: if a
// head changed after the snapshot, FOR UPDATE rechecks its row, but the
// test would read the other rows of its key in the same snapshot and give
// the same answer (key and seq never change). What keeps a key's order
// there is the lock on its head and missed_head. The LIMIT
// 1 in that lookup, which can never cut anything (a ctid is one row), keeps
// the planner from folding it into a join it may turn around: on a table
// without statistics (new, or autovacuum held up), the generic plan tested
// every pending row for being a head and rescanned the candidates for each
// one, about a second per claim with 11,000 messages pending, slower than
// the relays' leases let a batch wait
// (TestKeyOrderClaimCostIsBoundedWithoutStatistics).
//
// gap and missed_head use NOT IN, which PostgreSQL (14 and later, which hash
// tids) runs as a hash lookup whatever its row estimates: the generic plan's
// are far too low, and made the NOT EXISTS that gap used a nested loop (60
// ms per claim of 200 keys).
//
// The result has no order: the store sorts it so that each key's run comes
// in seq order, which publishers keep (sortRuns; sorting 1,000 wide rows
// twice, for a window and for the order, was about a tenth of the claim's
// server time).
var keyOrderClaim = `
WITH RECURSIVE walk (key, ctid, n) AS (
	(SELECT e.key, e.ctid, 1 FROM {t} AS e WHERE e.status = 'pending' AND e.key <> '' ORDER BY e.key, e.seq LIMIT 1)
	UNION ALL
	SELECT e.key, e.ctid, w.n + 1 FROM walk AS w
	CROSS JOIN LATERAL (SELECT e.key, e.ctid FROM {t} AS e
		WHERE e.status = 'pending' AND e.key <> '' AND e.key > w.key
		ORDER BY e.key, e.seq LIMIT 1) AS e
	WHERE w.n < {walk_limit}
), candidate (ctid, prio) AS (
	SELECT ctid, 3 * n + 2 FROM walk
	UNION ALL
	SELECT ctid, 3 * row_number() OVER (ORDER BY available_at, id) FROM ({oldest_window}) AS oldest
	WHERE oldest.key = '' OR oldest.key NOT IN (SELECT key FROM walk)
	UNION ALL
	SELECT ctid, 3 * row_number() OVER (ORDER BY available_at DESC, id DESC) + 1 FROM ({newest_window}) AS newest
	WHERE newest.key = '' OR newest.key NOT IN (SELECT key FROM walk)
), due_head AS MATERIALIZED (
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
), head AS (
	SELECT head AS ctid, id, key, head_seq AS seq, n AS prio FROM take WHERE r = 1
), room AS (
	SELECT {limit} - (SELECT count(*) FROM take) AS places
), capped AS (
	SELECT t.n, max(t.key) AS key, COALESCE(max(t.seq), max(t.head_seq)) AS seq, max(t.dead_floor) AS dead_floor, count(t.ctid) AS taken
	FROM take AS t
	WHERE (SELECT places FROM room) > 0
	GROUP BY t.n
	HAVING max(t.key) <> '' AND count(t.ctid) = {limit} / {keys_per_claim} AND bool_and(t.ok)
), share AS (
	SELECT r.places, (r.places + k.keys - 1) / GREATEST(k.keys, 1) AS each
	FROM room AS r CROSS JOIN (SELECT count(*) AS keys FROM capped) AS k
), more AS (
	SELECT c.key, c.n, c.dead_floor, f.ctid, f.seq, c.taken + 1 + f.r AS r FROM capped AS c CROSS JOIN share AS s
	CROSS JOIN LATERAL ({run_after_c}) AS f
	WHERE f.ok
), refill AS (
	SELECT m.key, max(m.n) AS n, max(m.seq) AS seq, max(m.dead_floor) AS dead_floor, max(m.r) AS r FROM more AS m
	GROUP BY m.key HAVING count(*) = (SELECT each FROM share)
), share2 AS (
	SELECT GREATEST(0, (s.places - (SELECT count(*) FROM more) + k.keys - 1) / GREATEST(k.keys, 1)) AS each
	FROM share AS s CROSS JOIN (SELECT count(*) AS keys FROM refill) AS k
), more2 AS (
	SELECT g.key, g.n, f.ctid, g.r + f.r AS r FROM refill AS g CROSS JOIN share2 AS s
	CROSS JOIN LATERAL ({run_after_g}) AS f
	WHERE s.each > 0 AND f.ok
), wanted AS (
	SELECT key, ctid, r FROM take WHERE ctid IS NOT NULL AND ok
	UNION ALL
	(SELECT key, ctid, r FROM (SELECT key, n, ctid, r FROM more UNION ALL SELECT key, n, ctid, r FROM more2) AS m
		ORDER BY r, n LIMIT (SELECT places FROM room))
), follower AS MATERIALIZED (
	SELECT o.ctid FROM {t} AS o
	WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM wanted))
		AND o.status = 'pending' AND o.available_at <= now()
		AND (o.locked_until IS NULL OR o.locked_until <= now())
	FOR UPDATE SKIP LOCKED
), gap AS (
	SELECT w.key, min(w.r) AS r FROM wanted AS w
	WHERE w.ctid NOT IN (SELECT ctid FROM follower)
	GROUP BY w.key
), leased_head AS (
	{lease} t.ctid = ANY(ARRAY(SELECT ctid FROM head))
	RETURNING {message_columns}, t.seq, t.ctid
), missed_head AS (
	SELECT key FROM head WHERE key <> '' AND id NOT IN (SELECT id FROM leased_head)
), leased_run AS (
	{lease} t.ctid = ANY(ARRAY(
		SELECT w.ctid FROM wanted AS w LEFT JOIN gap AS g ON g.key = w.key
		WHERE (g.r IS NULL OR w.r < g.r) AND w.key NOT IN (SELECT key FROM missed_head)))
	RETURNING {message_columns}, t.seq, t.ctid
)
SELECT {message_columns}, {claimed_columns} FROM (
	SELECT * FROM leased_head UNION ALL SELECT * FROM leased_run) AS leased`
