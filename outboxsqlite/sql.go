package outboxsqlite

import (
	"strconv"
	"strings"

	"github.com/go-outbox/outbox/outboxdriver"
)

// statements holds every SQL text of a table, built once from validated
// names. Lists of ids travel as one JSON array parameter, read back with
// json_each, so each statement's text and parameter count are fixed.
type statements struct {
	insertPrefix string // INSERT ... VALUES, followed by one insertRow per message
	insertRow    string // id, topic, key, payload, headers, created_at, available_at

	anyDue          string // ?1 now
	settlePublished string // ?1 token, ?2 ids
	settleKept      string // ?1 now, ?2 token, ?3 ids
	countOvertaken  string // ?1 token, ?2 ids about to be published; "" unless skipping dead messages in key order
	settleRetry     string // ?1 now, ?2 token, ?3 [[id, delay µs, error, attempts to count], ...]; returns the ids it retried
	postponeHeld    string // ?1 [[id], ...] of the retries settleRetry applied; key order only
	settleDead      string // ?1 token, ?2 [[id, error], ...]
	claimSelect     string // ?1 now, ?2 limit
	claimRun        string // ?1 now, ?2 key, ?3 rowid of the last message taken, ?4 limit; key order only
	claimUpdate     string // ?1 lease end, ?2 token, ?3 ids
	release         string // ?1 token, ?2 ids
	nextDue         string
	purge           string // ?1 cut-off in microseconds, ?2 limit

	stats       string // ?1 now
	get         string // ?1 id; returns messageColumns, overtaken
	listDead    string // ?1 after, ?2 limit; returns messageColumns, overtaken
	getOld      string // as get, on a table without overtaken (before migration 5)
	listDeadOld string // as listDead, on a table without overtaken
	retryDead   string // ?1 now, ?2 ids
	retryAll    string // ?1 now
	discardDead string // ?1 ids
}

// messageColumns are scanned by scanMessage, in this order.
const messageColumns = `id, topic, key, payload, headers, created_at, available_at, attempts, last_error, status, published_at`

func newStatements(s settings) statements {
	// In key order, a message is due only as the head of its key: no
	// earlier message of its key (by rowid, the insert order, see
	// migration 2) is pending, whether leased, retrying or scheduled later.
	// The key index answers that with one probe; its predicate is repeated
	// (e.key <> '') so the planner may use it. (VACUUM may renumber the
	// rowids of a table without an INTEGER PRIMARY KEY, but keeps their
	// order.)
	headOfKey, deadFloor := "", ""
	if s.orderByKey {
		headOfKey = `
	AND (o.key = '' OR NOT EXISTS (
		SELECT 1 FROM ` + s.qTable + ` AS e
			WHERE e.key = o.key AND e.key <> '' AND e.status = 'pending' AND e.rowid < o.rowid))`
	}
	if s.deadHoldsKey {
		// A dead message holds the rest of its key (spec §8): nor is a
		// message due behind a dead one of its key, and a run ends before
		// the first dead message after its head (the key dead index,
		// migration 4, answers both with one probe).
		headOfKey += `
	AND (o.key = '' OR NOT EXISTS (
		SELECT 1 FROM ` + s.qTable + ` AS d
			WHERE d.key = o.key AND d.key <> '' AND d.status = 'dead' AND d.rowid < o.rowid))`
		deadFloor = `
	AND rowid < coalesce((SELECT min(d.rowid) FROM {t} AS d WHERE d.key = ?2 AND d.key <> '' AND d.status = 'dead' AND d.rowid > ?3), 9223372036854775807)`
	}
	r := strings.NewReplacer("{t}", s.qTable, "{head_of_key}", headOfKey,
		"{unleased}", ` AND (locked_until IS NULL OR locked_until <= ?1)`)
	sql := func(q string) string { return r.Replace(strings.TrimSpace(q)) }

	// A message is due when available_at has come and no lease is in
	// force: a lease that ran out leaves it in its old place in the queue.
	claimSelect := `
SELECT ` + messageColumns + ` FROM {t} AS o
WHERE status = 'pending' AND available_at <= ?1{unleased}{head_of_key}
ORDER BY available_at, id
LIMIT ?2`
	var claimRun string
	if s.orderByKey {
		// In key order the claim leases runs, by the steps of
		// docs/design/key-order-claim.md ("spec"; §10 says where SQLite
		// differs): this statement finds the due heads, then claimRuns
		// reads their runs in Go (claimRun). Everything runs under the
		// write lock, so nothing changes in between. Each row comes with
		// its rowid, the insert order.
		claimSelect = `
WITH RECURSIVE walk (key, n) AS (
	-- spec §4.1 walk: the next key, then its head (candidate)
	SELECT (SELECT min(key) FROM {t} WHERE status = 'pending' AND key <> ''), 1
	UNION ALL
	SELECT (SELECT min(e.key) FROM {t} AS e WHERE e.status = 'pending' AND e.key <> '' AND e.key > w.key), w.n + 1
	FROM walk AS w WHERE w.key IS NOT NULL AND w.n < ` + strconv.Itoa(outboxdriver.KeyWalkLimit) + `
), candidate (rid, prio) AS (
	-- spec §4.3 candidate: the walk and the two windows (§4.2) take turns
	SELECT (SELECT e.rowid FROM {t} AS e WHERE e.status = 'pending' AND e.key <> '' AND e.key = w.key ORDER BY e.rowid LIMIT 1), 3 * w.n + 2
	FROM walk AS w WHERE w.key IS NOT NULL
	UNION ALL
	SELECT rid, 3 * row_number() OVER (ORDER BY available_at, id) FROM (
		SELECT rowid AS rid, available_at, id FROM {t} WHERE status = 'pending' AND available_at <= ?1{unleased}
		ORDER BY available_at, id LIMIT min(?2, ` + strconv.Itoa(outboxdriver.KeyWindow) + `))
	UNION ALL
	SELECT rid, 3 * row_number() OVER (ORDER BY available_at DESC, id DESC) + 1 FROM (
		SELECT rowid AS rid, available_at, id FROM {t} WHERE status = 'pending' AND available_at <= ?1{unleased}
		ORDER BY available_at DESC, id DESC LIMIT min(?2, ` + strconv.Itoa(outboxdriver.KeyWindow) + `))
)
-- spec §4.4 due_head, §4.5 take: every candidate due as a head, in turn order
SELECT ` + messageColumns + `, o.rowid FROM {t} AS o
JOIN (SELECT rid, min(prio) AS prio FROM candidate WHERE rid IS NOT NULL GROUP BY rid) AS c ON o.rowid = c.rid
WHERE status = 'pending' AND available_at <= ?1{unleased}{head_of_key}
ORDER BY c.prio
LIMIT ?2`
		// The messages after a head, in insert order, each with whether it
		// is due and not leased: the run is the prefix of those that are,
		// below the dead floor (spec §4.6, §4.7, §8).
		claimRun = `
SELECT ` + messageColumns + `, rowid, available_at <= ?1{unleased} FROM {t}
WHERE status = 'pending' AND key = ?2 AND key <> '' AND rowid > ?3` + deadFloor + `
ORDER BY rowid
LIMIT ?4`
	}

	// behindDead counts the pending messages that wait, in key order, behind the first
	// dead message of their key: a probe of the key index per key with a
	// dead message, and those are few.
	// It counts whatever the store's mode, so that `outbox status` shows
	// them from any store of the table.
	behindDead := `(SELECT count(*) FROM (SELECT key, min(rowid) AS first_dead FROM {t} WHERE status = 'dead' AND key <> '' GROUP BY key) AS d
		JOIN {t} AS p ON p.key = d.key AND p.key <> '' AND p.status = 'pending' AND p.rowid > d.first_dead)`
	// A store that skips dead messages in key order publishes later
	// messages of a key past its dead one: before the settlement deletes
	// (or keeps) them, each dead message of their keys counts those that
	// come after it (migration 5). It reads the rows the settlement is
	// about to change, by the same test, and the key dead index (migration
	// 4) finds each key's dead messages with one probe.
	countOvertaken := ""
	if s.skipsDead() {
		countOvertaken = sql(`
UPDATE {t} AS d SET overtaken = d.overtaken + o.n
FROM (SELECT x.rowid AS rid, count(*) AS n
	FROM {t} AS p JOIN {t} AS x ON x.key = p.key AND x.key <> '' AND x.status = 'dead' AND x.rowid < p.rowid
	WHERE p.lease_token = ?1 AND p.id IN (SELECT value FROM json_each(?2))
	GROUP BY x.rowid) AS o
WHERE d.rowid = o.rid AND d.status = 'dead'`)
	}
	return statements{
		insertPrefix: sql(`INSERT INTO {t} (id, topic, key, payload, headers, created_at, available_at) VALUES `),
		insertRow:    `(?, ?, ?, ?, ?, ?, ?)`,

		// The relay's probe before it takes the write lock: a claim that
		// would find nothing stays a read.
		anyDue: sql(`SELECT EXISTS (SELECT 1 FROM {t} AS o WHERE status = 'pending' AND available_at <= ?1{unleased}{head_of_key})`),

		settlePublished: sql(`DELETE FROM {t} WHERE lease_token = ?1 AND id IN (SELECT value FROM json_each(?2))`),
		settleKept: sql(`
UPDATE {t} SET status = 'published', published_at = ?1, lease_token = NULL, locked_until = NULL
WHERE lease_token = ?2 AND id IN (SELECT value FROM json_each(?3))`),
		countOvertaken: countOvertaken,
		settleRetry: sql(`
UPDATE {t} AS t
SET attempts = t.attempts + r.counted, available_at = ?1 + r.delay_us, last_error = r.err, lease_token = NULL, locked_until = NULL
FROM (SELECT value ->> 0 AS id, value ->> 1 AS delay_us, value ->> 2 AS err, value ->> 3 AS counted FROM json_each(?3)) AS r
WHERE t.id = r.id AND t.lease_token = ?2
RETURNING id`),
		// In key order, a retried head takes the messages held behind it
		// back in the queue with it (spec §7). It runs after the release
		// (see settle); unlike outboxpg's, it moves leased rows too, since
		// moving a row here changes no address.
		postponeHeld: sql(`
UPDATE {t} AS f SET available_at = h.available_at
FROM {t} AS h
WHERE h.id IN (SELECT value ->> 0 FROM json_each(?1)) AND h.status = 'pending' AND h.key <> ''
	AND f.key = h.key AND f.key <> '' AND f.status = 'pending' AND f.rowid > h.rowid
	AND f.available_at < h.available_at`),
		settleDead: sql(`
UPDATE {t} AS t
SET status = 'dead', attempts = t.attempts + 1, last_error = d.err, lease_token = NULL, locked_until = NULL
FROM (SELECT value ->> 0 AS id, value ->> 1 AS err FROM json_each(?2)) AS d
WHERE t.id = d.id AND t.lease_token = ?1`),
		// A claim leases rows by setting locked_until and lease_token (see
		// migration 3), as outboxpg does: a claimed message is due again when
		// its lease runs out, so a crashed relay's messages come back
		// without any clean-up, and available_at keeps the due time, so
		// they come back in their old place in the queue. The claim reads
		// the rows first, then leases exactly those ids; both run under the
		// write lock, so nothing changes in between.
		claimSelect: sql(claimSelect),
		claimRun:    sql(claimRun),
		claimUpdate: sql(`
UPDATE {t} SET locked_until = ?1, lease_token = ?2
WHERE status = 'pending' AND id IN (SELECT value FROM json_each(?3))`),
		release: sql(`
UPDATE {t} SET locked_until = NULL, lease_token = NULL
WHERE lease_token = ?1 AND status = 'pending' AND id IN (SELECT value FROM json_each(?2))`),
		// A message is due at available_at, or at the end of its lease if
		// that is later (a past one if the lease ran out). Unleased rows
		// come from the first entries of the pending index (past the few
		// leased ones), leased rows from the index of leases.
		nextDue: sql(`
SELECT min(due) FROM (
	SELECT min(available_at) AS due FROM {t} AS o WHERE status = 'pending' AND locked_until IS NULL{head_of_key}
	UNION ALL
	SELECT min(max(available_at, locked_until)) FROM {t} AS o WHERE status = 'pending' AND locked_until IS NOT NULL{head_of_key}
)`),
		purge: sql(`
DELETE FROM {t} WHERE status = 'published' AND id IN (
	SELECT id FROM {t}
	WHERE status = 'published' AND published_at < ?1
	ORDER BY published_at
	LIMIT ?2
)`),

		// One query, a subquery per count so each reads its partial index.
		stats: sql(`
SELECT
	(SELECT count(*) FROM {t} WHERE status = 'pending'),
	(SELECT count(*) FROM {t} WHERE status = 'pending' AND lease_token IS NOT NULL AND locked_until > ?1),
	(SELECT count(*) FROM {t} WHERE status = 'dead'),
	(SELECT count(*) FROM {t} WHERE status = 'published'),
	(SELECT min(created_at) FROM {t} WHERE status = 'pending'),
	(SELECT count(*) FROM {t} WHERE status = 'published' AND published_at > ?1 - 60000000),
	` + behindDead),
		get:         sql(`SELECT ` + messageColumns + `, overtaken FROM {t} WHERE id = ?1`),
		listDead:    sql(`SELECT ` + messageColumns + `, overtaken FROM {t} WHERE status = 'dead' AND id > ?1 ORDER BY id LIMIT ?2`),
		getOld:      sql(`SELECT ` + messageColumns + `, 0 FROM {t} WHERE id = ?1`),
		listDeadOld: sql(`SELECT ` + messageColumns + `, 0 FROM {t} WHERE status = 'dead' AND id > ?1 ORDER BY id LIMIT ?2`),
		retryDead: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = ?1, lease_token = NULL, locked_until = NULL
WHERE status = 'dead' AND id IN (SELECT value FROM json_each(?2))`),
		retryAll: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = ?1, lease_token = NULL, locked_until = NULL
WHERE status = 'dead'`),
		discardDead: sql(`DELETE FROM {t} WHERE status = 'dead' AND id IN (SELECT value FROM json_each(?1))`),
	}
}
