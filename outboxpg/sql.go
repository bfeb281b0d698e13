package outboxpg

import "strings"

// statements holds every SQL text of a table, built once from validated names.
// The pgx Store and the database/sql SQLWriter share it, so both write rows the
// same way.
type statements struct {
	insert       string // $1..$7: ids, topics, keys, payloads, headers, created_ats, available_ats
	insertNotify string // as insert, $8: channel

	settlePublished string // $1 ids, $2 token
	settleKept      string // $1 ids, $2 token
	settleRetry     string // $1 ids, $2 delays in microseconds, $3 errors, $4 token
	settleDead      string // $1 ids, $2 errors, $3 token
	claim           string // $1 lease in microseconds, $2 token, $3 limit
	release         string // $1 ids, $2 token
	nextDue         string
	purgeLock       string // $1 lock key
	purge           string // $1 before, $2 limit

	stats       string
	get         string // $1 id
	listDead    string // $1 after, $2 limit
	retryDead   string // $1 ids
	retryAll    string
	discardDead string // $1 ids
}

// messageColumns are scanned by scanMessage, in this order.
const messageColumns = `id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at`

func newStatements(n names) statements {
	r := strings.NewReplacer("{t}", n.qTable)
	sql := func(s string) string { return r.Replace(strings.TrimSpace(s)) }

	insert := `
INSERT INTO {t} (id, topic, key, payload, headers, created_at, available_at)
SELECT m.id, m.topic, m.key, m.payload, m.headers::jsonb, COALESCE(m.created_at, now()), COALESCE(m.available_at, now())
FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::timestamptz[], $7::timestamptz[])
	AS m(id, topic, key, payload, headers, created_at, available_at)`

	return statements{
		insert: sql(insert),
		// A data-modifying CTE runs to completion even though the outer query
		// ignores it, so inserting and notifying stay one statement. The
		// notification is queued and only delivered if the transaction commits.
		insertNotify: sql(`WITH ins AS (` + insert + `
)
SELECT pg_notify($8, '')`),

		settlePublished: sql(`DELETE FROM {t} WHERE id = ANY($1::uuid[]) AND lease_token = $2`),
		settleKept: sql(`
UPDATE {t} SET status = 'published', published_at = now(), lease_token = NULL
WHERE id = ANY($1::uuid[]) AND lease_token = $2`),
		settleRetry: sql(`
UPDATE {t} AS t
SET attempts = t.attempts + 1,
	available_at = now() + r.delay_us * interval '1 microsecond',
	last_error = r.err,
	lease_token = NULL
FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS r(id, delay_us, err)
WHERE t.id = r.id AND t.lease_token = $4`),
		settleDead: sql(`
UPDATE {t} AS t
SET status = 'dead', attempts = t.attempts + 1, last_error = d.err, lease_token = NULL
FROM unnest($1::uuid[], $2::text[]) AS d(id, err)
WHERE t.id = d.id AND t.lease_token = $3`),
		// The lease is available_at itself: a claimed message is due again when
		// its lease runs out, so a crashed relay's messages come back without
		// any clean-up. MATERIALIZED makes the locking subquery run exactly
		// once whatever plan the UPDATE gets. The UPDATE finds its rows with
		// id = ANY(ARRAY(...)), an index lookup per id: joining the CTE
		// instead lets the planner pick a hash join over a sequential scan of
		// the whole table once it holds some tens of thousands of rows.
		// RETURNING cannot see the old due time, so the final join with c
		// brings it back, and the caller sorts (RETURNING has no order).
		claim: sql(`
WITH c AS MATERIALIZED (
	SELECT id, available_at FROM {t}
	WHERE status = 'pending' AND available_at <= now()
	ORDER BY available_at, id
	LIMIT $3
	FOR UPDATE SKIP LOCKED
), u AS (
	UPDATE {t} AS t
	SET available_at = now() + $1::bigint * interval '1 microsecond', lease_token = $2
	WHERE t.id = ANY(ARRAY(SELECT id FROM c))
	RETURNING t.id, t.topic, t.key, t.payload, t.headers, t.created_at, t.attempts, t.last_error, t.status, t.published_at
)
SELECT u.id, u.topic, u.key, u.payload, u.headers, u.created_at, c.available_at, u.attempts, u.last_error, u.status, u.published_at
FROM u JOIN c ON c.id = u.id`),
		release: sql(`
UPDATE {t} SET available_at = now(), lease_token = NULL
WHERE id = ANY($1::uuid[]) AND lease_token = $2 AND status = 'pending'`),
		nextDue: sql(`
SELECT ceil(EXTRACT(EPOCH FROM min(available_at) - now()) * 1000000)::bigint
FROM {t} WHERE status = 'pending'`),
		purgeLock: `SELECT pg_try_advisory_xact_lock($1)`,
		// = ANY(ARRAY(...)) runs the bounded subquery once and deletes by
		// primary key; IN (...) may be planned as a join over the whole table.
		purge: sql(`
DELETE FROM {t} WHERE id = ANY(ARRAY(
	SELECT id FROM {t}
	WHERE status = 'published' AND published_at < $1
	ORDER BY published_at
	LIMIT $2
)) AND status = 'published'`),

		// One query, but a subquery per count so each reads its partial
		// index rather than the whole table: with retention on, published
		// rows may outnumber the others by far, and metrics call this often.
		stats: sql(`
SELECT
	(SELECT count(*) FROM {t} WHERE status = 'pending'),
	(SELECT count(*) FROM {t} WHERE status = 'pending' AND lease_token IS NOT NULL AND available_at > now()),
	(SELECT count(*) FROM {t} WHERE status = 'dead'),
	(SELECT count(*) FROM {t} WHERE status = 'published'),
	(SELECT COALESCE(GREATEST(0, floor(EXTRACT(EPOCH FROM now() - min(created_at)) * 1000000)), 0)::bigint
		FROM {t} WHERE status = 'pending')`),
		get:      sql(`SELECT ` + messageColumns + ` FROM {t} WHERE id = $1`),
		listDead: sql(`SELECT ` + messageColumns + ` FROM {t} WHERE status = 'dead' AND id > $1 ORDER BY id LIMIT $2`),
		retryDead: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), lease_token = NULL
WHERE status = 'dead' AND id = ANY($1::uuid[])`),
		retryAll: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), lease_token = NULL
WHERE status = 'dead'`),
		discardDead: sql(`DELETE FROM {t} WHERE status = 'dead' AND id = ANY($1::uuid[])`),
	}
}
