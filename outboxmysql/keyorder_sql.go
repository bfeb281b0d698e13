package outboxmysql

import (
	"strconv"
	"strings"

	"github.com/go-outbox/outbox/outboxdriver"
)

// keyStatements are the statements of claims in key order and of what
// keeps their order, by the steps of docs/design/key-order-claim.md
// ("spec"). MySQL has no data-modifying CTEs, so a claim runs them as
// several statements in one READ COMMITTED transaction, as outboxsqlite
// does, but MySQL runs claims side by side: each step that takes rows
// locks them (FOR UPDATE SKIP LOCKED) and rechecks that they are pending,
// due and not leased on their newest version, as outboxpg's claim does.
// Empty where the store does not order by key.
type keyStatements struct {
	heads        string // ?1 window, ?2 window, ?3 limit: id, seq, key of due heads in turn order
	lock         string // ids: messageColumns, seq of those still due and free, locked
	runPart      string // key, after seq[, key, after seq], limit: id, seq, key, ok; one part of a UNION ALL
	postponeHeld string // ids of the retried heads: their keys, seqs and due times
	heldBehind   string // key, seq, due time: the followers to move, locked
	moveHeld     string // due time, then ids
	retried      string // ?1 token, ids: those a retry under token applies to, locked
	anyDue       string
	nextDue      string

	countOvertaken string // ?1 token, ids about to be published; "" unless skipping dead messages
}

// lockSuffix ends a lock statement after its id list.
const lockSuffix = ") FOR UPDATE SKIP LOCKED"

func newKeyStatements(s settings) keyStatements {
	if !s.orderByKey {
		return keyStatements{}
	}
	// In key order a message is due only as the head of its key: no
	// earlier message of its key (by seq) is pending, whether leased,
	// retrying or scheduled later. Unless dead messages are skipped, nor
	// is it due behind a dead message of its key (spec §8). The key index
	// (migration 2) answers each with one probe.
	headOfKey := `
	AND (o.` + "`key`" + ` = '' OR NOT EXISTS (
		SELECT 1 FROM {t} AS e WHERE e.status = 'pending' AND e.` + "`key` = o.`key`" + ` AND e.seq < o.seq))`
	notBehindDead, deadFloor := "", ""
	if s.deadHoldsKey {
		notBehindDead = `
	AND (o.` + "`key`" + ` = '' OR NOT EXISTS (
		SELECT 1 FROM {t} AS d WHERE d.status = 'dead' AND d.` + "`key` = o.`key`" + ` AND d.seq < o.seq))`
		deadFloor = `
	AND seq < COALESCE((SELECT MIN(d.seq) FROM {t} AS d WHERE d.status = 'dead' AND d.` + "`key`" + ` = ? AND d.seq > ?), 9223372036854775807)`
	}
	r := strings.NewReplacer("{head_of_key}", headOfKey, "{not_behind_dead}", notBehindDead, "{dead_floor}", deadFloor)
	r2 := strings.NewReplacer("{t}", s.qTable, "{t by id}", s.byID(), "{now}", "UTC_TIMESTAMP(6)",
		"{unleased}", "(locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6))",
		"{unleased_o}", "(o.locked_until IS NULL OR o.locked_until <= UTC_TIMESTAMP(6))",
		"{walk_limit}", strconv.Itoa(outboxdriver.KeyWalkLimit), "{window}", strconv.Itoa(outboxdriver.KeyWindow),
		"{message_columns}", messageColumns)
	sql := func(q string) string { return r2.Replace(r.Replace(strings.TrimSpace(q))) }

	// A probe of the first KeyWindow due rows (spec §9): a head among them
	// is due now, and so is a full window without one, since the rows
	// held behind heads may be most of the table, too many to test each;
	// the claim that follows walks the keys and finds out, once per poll
	// at most.
	const dueWindow = `
WITH due AS (
	SELECT ` + "`key`" + `, seq FROM {t}
	WHERE status = 'pending' AND available_at <= {now} AND {unleased}
	ORDER BY available_at, id
	LIMIT {window}
)`
	const dueNow = `(SELECT COUNT(*) FROM due) = {window} OR EXISTS (SELECT 1 FROM due AS o WHERE TRUE{head_of_key}{not_behind_dead})`

	ks := keyStatements{
		// spec §4.1 walk: the first KeyWalkLimit keys with pending
		// messages and each one's head, MIN(seq), which a loose index
		// scan of the key index reads with one probe per key where keys
		// have many messages. §4.2 windows: the oldest and the newest due,
		// unleased rows. §4.3 candidate: the sources take turns (oldest
		// 3i, newest 3i+1, walk 3i+2), the walk's due heads by due time.
		// §4.4 due_head: each candidate kept if it is pending, due, not
		// leased, the head of its key and not behind a dead message. The
		// statement locks nothing: take (lock) rechecks what it reads.
		heads: sql(`
WITH walk AS (
	SELECT MIN(seq) AS seq FROM {t}
	WHERE status = 'pending' AND ` + "`key`" + ` > ''
	GROUP BY status, ` + "`key`" + `
	LIMIT {walk_limit}
), candidate AS (
	SELECT seq, 3 * ROW_NUMBER() OVER (ORDER BY available_at, id) AS prio FROM (
		SELECT seq, available_at, id FROM {t} WHERE status = 'pending' AND available_at <= {now} AND {unleased}
		ORDER BY available_at, id LIMIT ?) AS oldest
	UNION ALL
	SELECT seq, 3 * ROW_NUMBER() OVER (ORDER BY available_at DESC, id DESC) + 1 FROM (
		SELECT seq, available_at, id FROM {t} WHERE status = 'pending' AND available_at <= {now} AND {unleased}
		ORDER BY available_at DESC, id DESC LIMIT ?) AS newest
	UNION ALL
	SELECT o.seq, 3 * ROW_NUMBER() OVER (ORDER BY o.available_at, o.id) + 2
	FROM walk JOIN {t} AS o ON o.seq = walk.seq
	WHERE o.status = 'pending' AND o.available_at <= {now} AND {unleased_o}{not_behind_dead}
)
SELECT o.id, o.seq, o.` + "`key`" + ` FROM (SELECT seq, MIN(prio) AS prio FROM candidate GROUP BY seq) AS c
JOIN {t} AS o ON o.seq = c.seq
WHERE o.status = 'pending' AND o.available_at <= {now} AND {unleased_o}{head_of_key}{not_behind_dead}
ORDER BY c.prio
LIMIT ?`),
		// spec §4.5 take, §4.9 locked_run: rows another claim holds, or
		// that no longer qualify on their newest version, are passed over.
		lock: sql(`
SELECT {message_columns}, seq FROM {t by id}
WHERE status = 'pending' AND available_at <= {now} AND {unleased} AND id IN (`),
		// spec §4.6 top_up, §4.7 second_top_up: the messages after a head
		// (or after the last one taken), in seq order, each with whether
		// it is due and not leased; the run is the prefix of those that
		// are, below the dead floor (§8). Read without locks: the lock
		// step rechecks each.
		runPart: sql(`
(SELECT id, seq, ` + "`key`" + `, available_at <= {now} AND {unleased} AS ok FROM {t}
WHERE status = 'pending' AND ` + "`key`" + ` = ? AND seq > ?{dead_floor}
ORDER BY seq
LIMIT ?)`),
		// spec §7: a retried head takes the messages held behind it back
		// in the queue with it. It runs after the release (see settle);
		// like outboxsqlite's, it moves leased rows too: nothing here
		// settles by a row's address. The heads' keys and new due times
		// are read first (the settlement holds them), then each key's
		// followers with SKIP LOCKED, which are moved by primary key: an
		// UPDATE that scanned the key index itself would wait for a
		// writer's uncommitted insert of the key, as long as the
		// application's transaction lasts, while the settlement's
		// published messages wait unrecorded. A follower passed over is
		// held behind its head anyway, and the next retry moves it.
		postponeHeld: sql(`SELECT ` + "`key`" + `, seq, available_at FROM {t} WHERE status = 'pending' AND ` + "`key`" + ` <> '' AND id IN (`),
		heldBehind:   sql(`SELECT id FROM {t} WHERE status = 'pending' AND ` + "`key`" + ` = ? AND seq > ? AND available_at < ? FOR UPDATE SKIP LOCKED`),
		moveHeld:     sql(`UPDATE {t by id} SET available_at = ? WHERE id IN (`),
		// Only the retries that apply move their keys: a settlement under
		// a token that holds nothing changes nothing. MySQL's UPDATE
		// returns no rows, so they are read (and locked) first.
		retried: sql(`SELECT id FROM {t by id} WHERE lease_token = ? AND status = 'pending' AND id IN (`),
		anyDue:  sql(dueWindow + "\nSELECT " + dueNow),
		// Otherwise the wait is until the earliest lease of a due row ends
		// or the first message due later comes (NULL: none).
		nextDue: sql(dueWindow + `
SELECT CASE WHEN ` + dueNow + ` THEN 0 ELSE (
	SELECT TIMESTAMPDIFF(MICROSECOND, {now}, MIN(due)) FROM (
		SELECT MIN(locked_until) AS due FROM {t} WHERE status = 'pending' AND locked_until > {now} AND available_at <= {now}
		UNION ALL
		SELECT MIN(available_at) FROM {t} WHERE status = 'pending' AND available_at > {now}
	) AS l)
END`),
	}
	if s.skipsDead() {
		// A store that skips dead messages in key order publishes later
		// messages of a key past its dead one: before the settlement
		// deletes (or keeps) them, each dead message of their keys counts
		// those that come after it. It reads the rows the settlement is
		// about to change, by the same test (the lease token).
		ks.countOvertaken = sql(`
UPDATE {t} AS d JOIN (
	SELECT x.id AS dead_id, COUNT(*) AS n
	FROM {t} AS p JOIN {t} AS x ON x.` + "`key` = p.`key`" + ` AND x.status = 'dead' AND x.seq < p.seq
	WHERE p.lease_token = ? AND p.` + "`key`" + ` <> '' AND p.id IN (#ids#)
	GROUP BY x.id
) AS o ON d.id = o.dead_id
SET d.overtaken = d.overtaken + o.n
WHERE d.status = 'dead'`)
	}
	return ks
}

// runSQL is the statement that reads the runs of n keys, one part each.
func (ks keyStatements) runSQL(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = ks.runPart
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// lockSQL is the lock statement for n ids.
func (ks keyStatements) lockSQL(n int) string {
	return ks.lock + placeholders(n) + lockSuffix
}
