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

	settlePublished     string // $1 ids, $2 token
	deleteAt            string // $1 ctids, $2 token, $3 the table's file node at the claim, $4 the ids settled at those addresses, $5 {ctid: id} as jsonb
	settleKept          string // $1 ids, $2 token
	countOvertaken      string // $1 keys, $2 seqs of messages an open claim published; "" unless skipping dead messages in key order
	settleRetry         string // $1 ids, $2 delays in microseconds, $3 errors, $4 attempts to count (0 or 1), $5 token
	settleRetryKeyOrder string // as settleRetry, then the move of postponeHeld for the retries that applied
	postponeHeld        string // $1 ids of retried messages; key order only
	settleDead          string // $1 ids, $2 errors, $3 token
	claim               string // $1 lease in microseconds, $2 token, $3 limit (TransactionLeases: $1 limit); returns claimedColumns, then overtaken when skipping dead messages in key order
	putBack             string // TransactionLeases: rows an open claim deleted, back with their outcome (see putBackArgs); $13 overtaken, written only when skipping dead messages in key order
	release             string // $1 ids, $2 token
	nextDue             string
	purge               string // $1 age in microseconds, $2 limit

	stats       string
	get         string // $1 id; returns messageColumns, overtaken
	listDead    string // $1 after, $2 limit; returns messageColumns, overtaken
	getOld      string // as get, on a table without overtaken (before migration 6)
	listDeadOld string // as listDead, on a table without overtaken
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
	leaseTransaction leaseMode = true  // deleted in a transaction kept open (an open claim)
)

func newStatements(n names, o Options) statements {
	lease := leaseMode(o.TransactionLeases)
	return buildStatements(n, o.OrderByKey, o.deadHoldsKey(), lease, lease == leaseTransaction)
}

// leasedClaimBesideOpen is the claim that writes a lease on a table where
// open claims keep their rows in transactions: it passes over their rows as
// theirs do (see openClaimPlaces; spec §6 in docs/design/key-order-claim.md).
func leasedClaimBesideOpen(n names, o Options) string {
	return buildStatements(n, o.OrderByKey, o.deadHoldsKey(), leaseColumns, true).claim
}

// settleRetry records retries ($1 ids, $2 delays in microseconds, $3
// errors, $4 attempts to count (0 or 1), $5 token) of the rows the token
// still holds.
const settleRetry = `
UPDATE {t} AS t
SET attempts = t.attempts + r.counted,
	available_at = now() + r.delay_us * interval '1 microsecond',
	last_error = r.err,
	lease_token = NULL,
	locked_until = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::int[]) AS r(id, delay_us, err, counted)
WHERE t.id = r.id AND t.lease_token = $5`

// retryDeadChange makes dead messages pending and due at once, with their
// attempts reset (see deadInIDOrder).
const retryDeadChange = `
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), lease_token = NULL, locked_until = NULL
WHERE`

// overtakenBy counts, on each dead message, the messages of the CTE
// published (key, seq) that come after it in its key: a store that skips
// dead messages in key order publishes them past it (migration 6). The key
// dead index (migration 5) finds the dead messages of each published key
// with one probe, and most keys have none. Concurrent counts on one dead
// message add up: each UPDATE adds to the row version it locks.
//
// It locks the dead messages it counts on in id order (locked) before it
// updates them, as every statement that locks several dead messages does
// (deadInIDOrder, retryUnlessOvertaken): the UPDATE alone would take them
// in whatever order its plan joins them, and a dead retry of the same
// messages that took them the other way would deadlock with it: PostgreSQL
// aborts one of the two, and an aborted settlement hands its published
// messages back, to go out again. A message retried before its lock is no longer dead when
// locked, and so not counted.
const overtakenBy = `, counted AS (
	SELECT x.id, count(*) AS n FROM published AS p
		JOIN {t} AS x ON x.key = p.key AND x.key <> '' AND x.status = 'dead' AND x.seq < p.seq
	GROUP BY x.id
), locked AS MATERIALIZED (
	SELECT d.id, c.n FROM counted AS c JOIN {t} AS d ON d.id = c.id AND d.status = 'dead'
	ORDER BY d.id
	FOR UPDATE OF d
)
UPDATE {t} AS d SET overtaken = d.overtaken + l.n
FROM locked AS l
WHERE d.id = l.id AND d.status = 'dead'`

// deadInIDOrder returns a statement that locks the dead messages where
// selects, in id order, and then runs change (an UPDATE or DELETE of {t}
// ending in a WHERE clause) on them. Statements that lock several dead
// messages take them in that one order (see overtakenBy), whatever plan
// PostgreSQL picks for change itself.
func deadInIDOrder(where, change string) string {
	return `
WITH locked AS MATERIALIZED (
	SELECT id FROM {t} WHERE status = 'dead' AND ` + where + `
	ORDER BY id
	FOR UPDATE
)
` + strings.TrimSpace(change) + ` id = ANY(ARRAY(SELECT id FROM locked)) AND status = 'dead'`
}

// countingOvertaken turns st's statements that settle published messages
// into ones that also count them on the dead messages of their keys they
// passed (overtakenBy), in the same statement, and sets
// st.countOvertaken, for a store that skips dead messages in key order.
// Stores that hold their keys keep the plain statements and pay nothing.
// Each published row is counted from what its delete (or update) returns,
// so a row another claim took meanwhile is not counted.
func countingOvertaken(st *statements, sql func(string) string) {
	returning := func(stmt string) string {
		return sql("WITH published AS (\n" + stmt + "\n\tRETURNING key, seq\n)" + overtakenBy)
	}
	st.settlePublished = returning(st.settlePublished)
	st.settleKept = returning(st.settleKept)
	// deleteAt's second delete becomes a CTE beside at_address, both
	// returning what they deleted.
	const head, main = "\tRETURNING id\n)\nDELETE ", "\tRETURNING id, key, seq\n), by_id AS (\nDELETE "
	if strings.Count(st.deleteAt, head) != 1 {
		panic("outboxpg: deleteAt no longer ends with at_address and the delete by id")
	}
	st.deleteAt = sql(strings.Replace(st.deleteAt, head, main, 1) + `
	RETURNING key, seq
), published AS (
	SELECT key, seq FROM at_address UNION ALL SELECT key, seq FROM by_id
)` + overtakenBy)
	st.countOvertaken = sql(`WITH published AS (
	SELECT * FROM unnest($1::text[], $2::bigint[]) AS p(key, seq)
)` + overtakenBy)
}

// buildStatements builds the statements; deadHolds says whether a dead
// message holds the rest of its key in key order, besideOpen whether open
// claims may keep rows of the table in their transactions.
func buildStatements(n names, orderByKey, deadHolds bool, lease leaseMode, besideOpen bool) statements {
	// In key order, a message is due only as the head of its key (spec
	// §1 and §5, docs/design/key-order-claim.md). The key index answers
	// that with one probe; its predicate is repeated (e.key <> '') so the
	// planner may use it.
	isHead, headOfKey := "", ""
	if orderByKey {
		// The probe reads the key index backwards from the message: a
		// message held behind its head meets its pending predecessor
		// first. Read forwards, it would step over every entry the key's
		// published messages left in the index until vacuum removes them.
		isHead = `(o.key = '' OR (
			SELECT e.seq FROM ` + n.qTable + ` AS e
			WHERE e.key = o.key AND e.key <> '' AND e.status = 'pending' AND e.seq < o.seq
			ORDER BY e.seq DESC LIMIT 1) IS NULL)`
		headOfKey = "\n\t\tAND " + isHead
	}
	// Unless the store skips dead messages, a dead message holds the rest
	// of its key (spec §8): notBehindDead for a candidate o, and the
	// head's dead_floor, read by take and handed on, for runs (runAfter).
	// The key dead index (migration 5) answers each with one probe.
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
	// stays open until they are published ($1 limit; see openClaims).
	leaseRows, limit := "UPDATE "+n.qTable+" AS t\nSET locked_until = now() + $1::bigint * interval '1 microsecond', lease_token = $2\nWHERE", "$3"
	if lease == leaseTransaction {
		leaseRows, limit = "DELETE FROM "+n.qTable+" AS t WHERE", "$1"
	}
	// free(alias) tests that no open claim keeps a row: their rows look
	// pending, due and free to every other transaction, and lists cut
	// at the batch size before locking (the key-order windows) and the idle
	// probe must pass over them by themselves, or a second worker's claim
	// comes back empty while work is free (spec §6, which explains the
	// xmax test; TestConcurrentTransactionLeaseClaimsEachFindFreeWork).
	free := func(alias string) string {
		if !besideOpen {
			return ""
		}
		m := alias + "xmax::text::bigint"
		return " AND NOT (" + m + " = ANY(ARRAY(SELECT x::text::bigint % 4294967296 FROM pg_snapshot_xip(pg_current_snapshot()) AS x))" +
			" OR (" + m + " <> 0 AND (" + m + " - (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint % 4294967296) + 4294967296) % 4294967296 < 2147483648))"
	}
	// The key-order claim's windows (spec §4.2): the oldest and the newest
	// due rows. Beside open claims, the first rows free of them, and the
	// first rows whatever holds them: free may take a row for an open
	// claim's that is not, and such a row must still come to a claim
	// (due_head puts the free ones first).
	window := func(order string) string {
		w := func(free string) string {
			return `(SELECT ctid, key, available_at, id FROM {t}
		WHERE status = 'pending' AND available_at <= now() AND (locked_until IS NULL OR locked_until <= now())` + free + `
		ORDER BY ` + order + `
		LIMIT least({limit}, {window}))`
		}
		if !besideOpen {
			return w("")
		}
		return w(free("")) + "\n\tUNION\n\t" + w("")
	}
	// A store that skips dead messages counts, on each dead message, the
	// messages that overtake it (migration 6); a dead message retried by
	// force keeps its count while pending. An open claim deletes its rows
	// and puts back those it does not publish, so its claims return the
	// count ({claimed_columns}, {overtaken}) and putBack writes it back
	// ({overtaken_column}, {overtaken_value}). Other stores, which may run
	// on a table without the column, leave it out.
	claimed, overtaken, overtakenColumn, overtakenValue := claimedColumns, "", "", ""
	if orderByKey && !deadHolds {
		claimed, overtaken, overtakenColumn, overtakenValue = claimedColumns+", overtaken", ", t.overtaken", ", overtaken", ", m.overtaken"
	}
	r := strings.NewReplacer("{t}", n.qTable, "{head_of_key}", headOfKey, "{is_head}", isHead, "{lease}", leaseRows, "{limit}", limit,
		"{oldest_window}", window("available_at, id"), "{newest_window}", window("available_at DESC, id DESC"), "{free_o}", free("o."),
		"{not_behind_dead}", notBehindDead, "{dead_floor}", deadFloor, "{run_after_h}", runAfter("h", "{limit} / {keys_per_claim}"),
		"{run_after_c}", runAfter("c", "s.each"), "{run_after_g}", runAfter("g", "s.each"),
		"{walk_limit}", strconv.Itoa(outboxdriver.KeyWalkLimit), "{window}", strconv.Itoa(outboxdriver.KeyWindow),
		"{message_columns}", messageColumns, "{claimed_columns}", strings.ReplaceAll(claimed, "{t}", n.qTable), "{keys_per_claim}", strconv.Itoa(keysPerClaim),
		"{overtaken}", overtaken, "{overtaken_column}", overtakenColumn, "{overtaken_value}", overtakenValue)
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
		// In key order only a head is due, and the rows held behind heads
		// in flight may be most of the table, too many to test each (see
		// docs/benchmarks.md). So the probe looks among the first
		// KeyWindow due rows only, as the claim's window does (spec §9).
		// If the window is full and holds no head, it answers "due now"
		// all the same: the claim that follows walks the keys and finds
		// out, once per poll at most.
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

	st := statements{
		insert:          sql(insert),
		insertNotify:    withNotify(insert),
		insertOne:       sql(insertOne),
		insertOneNotify: withNotify(insertOne),

		// The rows an open claim deleted come back as they were, with their
		// place in the queue and in their key (seq), but for what their
		// outcome changes: attempts, error, status, and the due time when
		// a delay is given (-1 keeps it). Times count from the statement:
		// the transaction began at the claim.
		putBack: sql(`
INSERT INTO {t} (id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at, seq{overtaken_column})
OVERRIDING SYSTEM VALUE
SELECT m.id, m.topic, m.key, m.payload, m.headers::jsonb, m.created_at,
	CASE WHEN m.delay_us < 0 THEN m.available_at ELSE statement_timestamp() + m.delay_us * interval '1 microsecond' END,
	m.attempts, m.last_error, m.status, CASE WHEN m.status = 'published' THEN statement_timestamp() END, m.seq{overtaken_value}
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[], $7::timestamptz[],
		$8::int[], $9::text[], $10::text[], $11::bigint[], $12::bigint[], $13::int[])
	AS m(id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, seq, delay_us, overtaken)`),
		settlePublished: sql(`DELETE FROM {t} WHERE id = ANY($1::uuid[]) AND lease_token = $2`),
		// The file node condition has no column in it: PostgreSQL checks it
		// once, before the scan. The ids are checked too (see addressBook):
		// a row of the claim that an outside UPDATE moved may sit at the
		// address of another, with the token. $5 maps each address to the
		// id settled there (a jsonb object: a lookup per row, whatever the
		// plan; joining the rows with the ids was planned as a nested loop
		// comparing every row with every id, 100 ms for 1,000 rows, when
		// the table's statistics were stale). The rows not found at their
		// address (moved by an UPDATE, or every row after a rewrite) are
		// deleted by id in the same statement, so in the exchange's
		// transaction, before its claim: a claim that ran first would
		// still see a published head pending and leased, and pass over its
		// key (TestExchangeThatPublishesAMovedHeadClaimsTheKeysNextMessage).
		// When every row was at its address, that second delete has no id
		// to look up.
		deleteAt: sql(`
WITH at_address AS (
	DELETE FROM {t} WHERE ctid = ANY($1::tid[]) AND lease_token = $2
		AND pg_relation_filenode('{t}') = $3::oid
		AND $5::jsonb ->> ctid::text = id::text
	RETURNING id
)
DELETE FROM {t} WHERE id = ANY(ARRAY(SELECT unnest($4::uuid[]) EXCEPT SELECT id FROM at_address)) AND lease_token = $2`),
		settleKept: sql(`
UPDATE {t} SET status = 'published', published_at = now(), lease_token = NULL, locked_until = NULL
WHERE id = ANY($1::uuid[]) AND lease_token = $2`),
		settleRetry: sql(settleRetry),
		// In key order, the retry and the move of the messages held behind
		// the retried heads (as postponeHeld, below) are one statement, so
		// that only the retries that applied move their keys: a settlement
		// under a token that holds nothing (a relay late past its lease)
		// changes nothing, and does not wait on rows other claims hold.
		settleRetryKeyOrder: sql(`
WITH retried AS (` + settleRetry + `
	RETURNING t.key, t.seq, t.available_at
)
UPDATE {t} AS f SET available_at = h.available_at, lease_token = NULL, locked_until = NULL
FROM retried AS h
WHERE h.key <> '' AND f.key = h.key AND f.key <> '' AND f.status = 'pending' AND f.seq > h.seq
	AND f.available_at < h.available_at
	AND (f.locked_until IS NULL OR f.locked_until <= now())`),
		// In key order, a retried head takes the messages held behind it
		// back in the queue with it, so that they do not fill the first
		// due rows a claim looks at (spec §7). It runs after the release
		// of the rest of the head's run (spec §7, settlement order), and
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
		get:         sql(`SELECT ` + messageColumns + `, overtaken FROM {t} WHERE id = $1`),
		listDead:    sql(`SELECT ` + messageColumns + `, overtaken FROM {t} WHERE status = 'dead' AND id > $1 ORDER BY id LIMIT $2`),
		getOld:      sql(`SELECT ` + messageColumns + `, 0 FROM {t} WHERE id = $1`),
		listDeadOld: sql(`SELECT ` + messageColumns + `, 0 FROM {t} WHERE status = 'dead' AND id > $1 ORDER BY id LIMIT $2`),
		retryDead:   sql(deadInIDOrder(`id = ANY($1::uuid[])`, retryDeadChange)),
		retryAll:    sql(deadInIDOrder(`true`, retryDeadChange)),
		discardDead: sql(deadInIDOrder(`id = ANY($1::uuid[])`, `DELETE FROM {t} WHERE`)),
	}
	if orderByKey && !deadHolds {
		countingOvertaken(&st, sql)
	}
	return st
}
