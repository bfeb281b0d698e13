package outboxmysql

import (
	"encoding/hex"
	"strings"

	"github.com/google/uuid"
)

// statements holds the SQL text of a table, built once from validated
// names. Statements that take a list of ids end with "IN (" and are
// completed per call with one placeholder per id (idList): MySQL has no
// array parameter. The DELETEs of settlements, which must look each row up
// by its primary key (see deleteByID), join a table that JSON_TABLE builds
// from one parameter instead: a JSON array of hex strings, with a CHAR
// column, the plainest form MySQL and MariaDB both read alike.
//
// Every time is the database's: UTC_TIMESTAMP(6) is the same throughout a
// statement, and a DATETIME holds no time zone, so the store compares and
// stores UTC whatever the session's time_zone.
type statements struct {
	insertPrefix string // INSERT ... VALUES, followed by one insertRow per message
	insertRow    string // id, topic, key, payload, headers, created_at or NULL, available_at or NULL

	anyDue          string
	anyDueFree      string // TransactionLeases: passes over held rows
	leasedTo        string // TransactionLeases: ?1 token, ids: those leased to the token
	deleteByID      string // TransactionLeases: ?1 JSON array of hex ids
	nextDueFree     string // TransactionLeases: µs until the first free rows are due, unleased and leased
	claimSelect     string // ?1 limit
	claimUpdate     string // ?1 lease µs, ?2 token, ids
	settlePublished string // ?1 JSON array of hex ids, ?2 token
	settleKept      string // ?1 token, ids
	release         string // ?1 token, ids
	nextDue         string
	purge           string // ?1 age µs, ?2 limit
	stats           string
	get             string // ?1 id; returns messageColumns, overtaken
	listDead        string // ?1 after, ?2 limit; returns messageColumns, overtaken
	retryDead       string // ids
	retryAll        string
	discardDead     string // ids
	now             string
}

func newStatements(s settings) statements {
	r := strings.NewReplacer("{t}", s.qTable,
		"{t by id}", s.byID(),
		"{t by status and id}", s.byStatusAndID(),
		"{pending_idx}", quote(s.table+"_pending_idx"),
		"{now}", "UTC_TIMESTAMP(6)",
		"{unleased}", "(locked_until IS NULL OR locked_until <= UTC_TIMESTAMP(6))")
	sql := func(q string) string { return r.Replace(strings.TrimSpace(q)) }
	return statements{
		insertPrefix: sql("INSERT INTO {t} (id, topic, `key`, payload, headers, created_at, available_at) VALUES "),
		// A message without CreatedAt or AvailableAt gets the database's
		// time of the insert, the same for every row of the statement.
		insertRow: sql(`(?, ?, ?, ?, ?, COALESCE(?, {now}), COALESCE(?, {now}))`),

		// The relay's probe before a transaction: a claim that would find
		// nothing stays a read that locks nothing.
		anyDue: sql(`SELECT EXISTS (SELECT 1 FROM {t} WHERE status = 'pending' AND available_at <= {now} AND {unleased})`),
		// With TransactionLeases, the rows of held claims look due to a
		// read that locks nothing: the probe and NextDue pass over them as
		// claims do, with locking reads that skip locked rows (no row: none
		// due). Outside a transaction each one's locks end with it.
		anyDueFree: sql(`
SELECT TRUE FROM {t} FORCE INDEX ({pending_idx}) WHERE status = 'pending' AND available_at <= {now} AND {unleased}
ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED`),
		// A held claim's published rows, deleted by one primary key
		// lookup each, without a token (the claim's locks make them its
		// own): the ids come from a table built from the JSON array
		// of their hex strings (?1, see hexIDList; JSON_TABLE is in MariaDB
		// from 10.6 and MySQL from 8.0.4, as SKIP LOCKED nearly is), and
		// the join reads them first (STRAIGHT_JOIN) and finds each row by
		// eq_ref. A DELETE ... WHERE id IN (...) may scan the table
		// instead where the optimizer finds that cheaper (a small table),
		// and a DELETE, unlike an UPDATE (semi-consistent read), waits for
		// each row it scans that another transaction locks, listed or
		// not: the settlement of one held claim would wait for another's
		// rows, and two such settlements deadlock, which loses a claim.
		deleteByID: sql(`
DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (h CHAR(32) PATH '$')) AS x
STRAIGHT_JOIN {t} AS o ON o.id = UNHEX(x.h)`),
		// The published settlement of a leased claim: the same lookups,
		// of the rows still leased to the token (?2). As a scan, it would
		// wait for every row a held claim locks, or another claim.
		settlePublished: sql(`
DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (h CHAR(32) PATH '$')) AS x
STRAIGHT_JOIN {t} AS o ON o.id = UNHEX(x.h)
WHERE o.lease_token = ?`),
		leasedTo: sql(`SELECT id FROM {t} WHERE lease_token = ? AND id IN (`),
		// NextDue's: µs until the first message is due that no held claim
		// holds. Only the first part locks: the due rows, read as claims
		// read them (the pending index, in order, skipping locked rows),
		// so it passes over held rows without a lock of its own on any of
		// their index entries. A held claim's settlement must delete
		// those entries, and would wait for a read that kept one (MariaDB
		// keeps its lock on the entry of a row it skipped because the row
		// was locked by its primary key only); that read waiting in turn
		// for a row the settlement deletes was a deadlock, which the held
		// claim could lose. The other parts read without locks: the first
		// row not due yet (claims take due rows only; a leased one among
		// them at most wakes the relay early), and the rows whose lease is
		// in force, by the end of their lease (after their due time but
		// for an operator's UPDATE of available_at).
		//
		// A row that became due while a held claim keeps a lock on its
		// entry (MariaDB keeps the locks of the entry just past the due
		// rows a claim read, and of rows it passed over) is missed by this
		// part and by other claims until that claim ends, at its next
		// exchange: the claim's own worker takes it then, or the relay's
		// poll finds it.
		nextDueFree: sql(`
SELECT wait FROM (
	(SELECT TIMESTAMPDIFF(MICROSECOND, {now}, available_at) AS wait FROM {t} FORCE INDEX ({pending_idx})
	WHERE status = 'pending' AND available_at <= {now} AND {unleased}
	ORDER BY available_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
	UNION ALL
	(SELECT TIMESTAMPDIFF(MICROSECOND, {now}, MIN(available_at)) FROM {t}
	WHERE status = 'pending' AND available_at > {now})
	UNION ALL
	(SELECT TIMESTAMPDIFF(MICROSECOND, {now}, MIN(GREATEST(available_at, locked_until))) FROM {t}
	WHERE status = 'pending' AND locked_until > {now})
) AS d WHERE wait IS NOT NULL`),
		// A message is due when available_at has come and no lease is in
		// force: a lease that ran out leaves it in its old place in the
		// queue. The claim reads the first entries of the pending index and
		// locks the rows it returns (READ COMMITTED: no gap, see inTx),
		// passing over rows that other claims or uncommitted inserts hold.
		claimSelect: sql(`
SELECT ` + messageColumns + ` FROM {t} FORCE INDEX ({pending_idx})
WHERE status = 'pending' AND available_at <= {now} AND {unleased}
ORDER BY available_at, id
LIMIT ?
FOR UPDATE SKIP LOCKED`),
		// The lease: locked_until and lease_token, with available_at kept as
		// the due time, so a message whose relay died comes back by itself
		// when its lease runs out, in its old place in the queue.
		claimUpdate: sql(`
UPDATE {t by id} SET locked_until = {now} + INTERVAL ? MICROSECOND, lease_token = ?
WHERE status = 'pending' AND id IN (`),

		settleKept: sql(`
UPDATE {t by id} SET status = 'published', published_at = {now}, lease_token = NULL, locked_until = NULL
WHERE lease_token = ? AND id IN (`),
		release: sql(`
UPDATE {t by id} SET locked_until = NULL, lease_token = NULL
WHERE lease_token = ? AND status = 'pending' AND id IN (`),
		// A message is due at available_at, or at the end of its lease if
		// that is later. Both halves read the leased index: the unleased
		// rows (locked_until NULL) come first in it, by due time, so the
		// first half is one entry; the second reads the leased rows only.
		nextDue: sql(`
SELECT TIMESTAMPDIFF(MICROSECOND, {now}, MIN(due)) FROM (
	SELECT MIN(available_at) AS due FROM {t} WHERE status = 'pending' AND locked_until IS NULL
	UNION ALL
	SELECT MIN(GREATEST(available_at, locked_until)) FROM {t} WHERE status = 'pending' AND locked_until IS NOT NULL
) AS d`),
		purge: sql(`
DELETE FROM {t}
WHERE status = 'published' AND published_at < {now} - INTERVAL ? MICROSECOND
ORDER BY published_at
LIMIT ?`),

		// One query, a subquery per count so each reads an index of its
		// status. BehindDead counts the pending messages that come, in
		// insert order, after the first dead message of their key.
		stats: sql(`
SELECT
	(SELECT COUNT(*) FROM {t} WHERE status = 'pending'),
	(SELECT COUNT(*) FROM {t} WHERE status = 'pending' AND lease_token IS NOT NULL AND locked_until > {now}),
	(SELECT COUNT(*) FROM {t} WHERE status = 'dead'),
	(SELECT COUNT(*) FROM {t} WHERE status = 'published'),
	(SELECT COALESCE(GREATEST(0, TIMESTAMPDIFF(MICROSECOND, MIN(created_at), {now})), 0) FROM {t} WHERE status = 'pending'),
	(SELECT COUNT(*) FROM {t} WHERE status = 'published' AND published_at > {now} - INTERVAL 1 MINUTE),
	(SELECT COUNT(*) FROM (SELECT ` + "`key`" + `, MIN(seq) AS first_dead FROM {t} WHERE status = 'dead' AND ` + "`key`" + ` <> '' GROUP BY ` + "`key`" + `) AS d
		JOIN {t} AS p ON p.` + "`key` = d.`key`" + ` AND p.status = 'pending' AND p.seq > d.first_dead)`),
		get:      sql(`SELECT ` + messageColumns + `, overtaken FROM {t} WHERE id = ?`),
		listDead: sql(`SELECT ` + messageColumns + `, overtaken FROM {t} WHERE status = 'dead' AND id > ? ORDER BY id LIMIT ?`),
		retryDead: sql(`
UPDATE {t by status and id} SET status = 'pending', attempts = 0, available_at = {now}, lease_token = NULL, locked_until = NULL
WHERE status = 'dead' AND id IN (`),
		retryAll: sql(`
UPDATE {t} SET status = 'pending', attempts = 0, available_at = {now}, lease_token = NULL, locked_until = NULL
WHERE status = 'dead'`),
		discardDead: sql(`DELETE FROM {t} WHERE status = 'dead' AND id IN (`),
		now:         `SELECT UTC_TIMESTAMP(6)`,
	}
}

// byID and byStatusAndID are the table in a statement that changes or
// locks rows listed by id, with the one index that finds each listed row
// by a lookup. Left to choose, the optimizer may read a range of another
// index on status instead (status = 'pending' matches every pending row),
// and a statement that changes or locks rows waits for each row it reads
// that another transaction locks, a held claim's too.
//
// Claims and settlements go by primary key: such a statement waits for a
// row before it has locked any of the row's index entries. Through
// status_idx it would lock the row's (status, id) entry first, then wait
// for the row; if a held claim holds that row (it was claimed again after
// a lease by columns lapsed, and its first owner settles it late), the
// held claim's own settlement must change that entry: a deadlock, which
// the held claim may lose, and its batch is published again. Statements
// that ask for rows of another status than pending (retry of dead
// messages, replay of published ones) go by status_idx, which leaves the
// pending rows, held ones among them, untouched.
func (s settings) byID() string {
	return s.qTable + " FORCE INDEX (PRIMARY)"
}

func (s settings) byStatusAndID() string {
	return s.qTable + " FORCE INDEX (" + quote(s.table+"_status_idx") + ")"
}

// idList completes a statement that ends with "IN (" for n ids.
func idList(stmt string, n int) string {
	return stmt + placeholders(n) + ")"
}

// hexIDList is ids as a JSON array of their hex strings, the parameter of
// statements.deleteByID.
func hexIDList(ids []uuid.UUID) string {
	var b strings.Builder
	b.Grow(len(ids)*35 + 2)
	b.WriteByte('[')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		b.WriteString(hex.EncodeToString(id[:]))
		b.WriteByte('"')
	}
	b.WriteByte(']')
	return b.String()
}

// caseByID returns "CASE id WHEN ? THEN ? ... END" for n ids: one value per
// row in a single-table UPDATE, which finds its rows by primary key and so
// locks only them (a join with a derived table of values might not).
func caseByID(n int) string {
	return "CASE id" + strings.Repeat(" WHEN ? THEN ?", n) + " END"
}

// retrySQL is the retry settlement of n messages. Its parameters: the
// (id, attempts counted) pairs, the (id, delay µs) pairs, the (id, error)
// pairs, the token, then the ids.
func retrySQL(s settings, n int) string {
	return `UPDATE ` + s.byID() + ` SET attempts = attempts + ` + caseByID(n) + `,
	available_at = UTC_TIMESTAMP(6) + INTERVAL ` + caseByID(n) + ` MICROSECOND,
	last_error = ` + caseByID(n) + `, lease_token = NULL, locked_until = NULL
WHERE lease_token = ? AND status = 'pending' AND id IN (` + placeholders(n) + ")"
}

// deadSQL is the dead settlement of n messages. Its parameters: the (id,
// error) pairs, the token, then the ids.
func deadSQL(s settings, n int) string {
	return `UPDATE ` + s.byID() + ` SET status = 'dead', attempts = attempts + 1,
	last_error = ` + caseByID(n) + `, lease_token = NULL, locked_until = NULL
WHERE lease_token = ? AND status = 'pending' AND id IN (` + placeholders(n) + ")"
}
