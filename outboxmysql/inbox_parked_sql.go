package outboxmysql

import "strings"

// MaxParkedKeyBytes is the longest key a parked message may have: the
// parked table's key column is VARBINARY(2048), indexed with the consumer
// and the arrival order in one InnoDB index entry (3072 bytes at most). A
// consumer's messages come from a broker, which may allow longer keys than
// the outbox table's MaxKeyBytes; parking one with a longer key fails.
const MaxParkedKeyBytes = 2048

// parkedStatements are the statements on the parked table that sits beside
// an inbox table: <table>_parked, one row per consumer and parked message.
// MySQL cannot change a table that a subquery of the same statement reads,
// so the statements that pick rows by the state of others (the first of a
// key) are locking reads, and the changes that follow find their rows by
// primary key, in the same READ COMMITTED transaction.
type parkedStatements struct {
	create string

	park   string // consumer, id, topic, key, headers, payload, created_at, error, attempts
	behind string // consumer, id, topic, key, headers, payload, created_at, error

	head       string // consumer, key: the key's first row, shared lock
	headLock   string // consumer, key: the key's first row, with its state, exclusive lock
	lockKeys   string // consumer; then the keys, appended as an IN list
	keysOf     string // consumer; then the ids
	pickTake   string // consumer, limit: requested retries, exclusive locks, SKIP LOCKED
	pickRetry  string // consumer, then the ids if any: what a retry request may mark
	pickDelete string // consumer, then the ids, then the condition's arguments

	takeRows   string // consumer; then ids: set the mark
	retryRows  string // consumer; then ids
	deleteRows string // consumer; then ids
	requestOne string // consumer, id: the release of a key to its next message
	takeOne    string // consumer, id

	selectRows string // consumer; then ids: rows just taken
	list       string // consumer, consumer, after, limit
	get        string // consumer, consumer, id

	parkAgain string // error, attempts, consumer, id, taken_at
	giveBack  string // consumer, id, taken_at
	forget    string // consumer, then the ids if any
	overtaken string // consumer, key

	counts  string
	stalled string
	taken   string
	waiting string
}

// parkedColumns are the columns scanParked reads, from the table aliased p,
// then behind: a waiting message's key's first parked message.
const parkedColumns = "p.consumer, p.message_id, p.topic, p.`key`, p.headers, p.payload, p.created_at, p.error, p.attempts, p.parked_at, p.retry_requested, p.waiting, p.overtaken, p.taken_at"

func newParkedStatements(table string) parkedStatements {
	name := table + "_parked"
	q := quote(name)
	r := strings.NewReplacer("{p}", q, "{key}", "`key`")
	sql := r.Replace
	// A row p that is the first parked message of its key for its
	// consumer, in arrival order (seq).
	first := sql(`NOT EXISTS (SELECT 1 FROM {p} AS e WHERE e.consumer = p.consumer AND e.{key} = p.{key} AND e.seq < p.seq)`)
	selectCols := parkedColumns + sql(`, CASE WHEN p.waiting THEN (
	SELECT e.message_id FROM {p} AS e WHERE e.consumer = p.consumer AND e.{key} = p.{key} AND e.seq < p.seq ORDER BY e.seq LIMIT 1) END`)
	return parkedStatements{
		// seq numbers the rows in arrival order (AUTO_INCREMENT), the
		// order of a key's messages; a row parked again keeps its seq.
		// error is text, kept valid UTF-8 (sqlrow.StorableText).
		create: sql(`CREATE TABLE IF NOT EXISTS {p} (
	consumer        VARBINARY(200)  NOT NULL,
	message_id      BINARY(16)      NOT NULL,
	seq             BIGINT          NOT NULL AUTO_INCREMENT,
	topic           BLOB            NOT NULL,
	{key}           VARBINARY(2048) NOT NULL DEFAULT '',
	headers         LONGTEXT        CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
	payload         LONGBLOB        NOT NULL,
	created_at      DATETIME(6)     NULL,
	error           MEDIUMTEXT      CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
	attempts        INT             NOT NULL,
	parked_at       DATETIME(6)     NOT NULL,
	retry_requested BOOLEAN         NOT NULL DEFAULT FALSE,
	waiting         BOOLEAN         NOT NULL DEFAULT FALSE,
	overtaken       INT             NOT NULL DEFAULT 0,
	taken_at        DATETIME(6)     NULL,
	PRIMARY KEY (consumer, message_id),
	UNIQUE KEY ` + quote(name+"_seq_key") + ` (seq),
	KEY ` + quote(name+"_key_idx") + ` (consumer, {key}, seq),
	KEY ` + quote(name+"_retry_idx") + ` (consumer, retry_requested, parked_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`),
		// A message parked after a failure is a key's head: it waits for
		// nobody, even when it was retried from waiting.
		park: sql(`INSERT INTO {p} (consumer, message_id, topic, {key}, headers, payload, created_at, error, attempts, parked_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE error = VALUES(error), attempts = VALUES(attempts), parked_at = VALUES(parked_at),
	retry_requested = FALSE, waiting = FALSE, taken_at = NULL`),
		behind: sql(`INSERT INTO {p} (consumer, message_id, topic, {key}, headers, payload, created_at, error, attempts, parked_at, waiting)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, UTC_TIMESTAMP(6), TRUE)
ON DUPLICATE KEY UPDATE consumer = consumer`),
		// A shared lock on the key's first row: an unpark of it under way
		// (a retry that succeeded) is waited for, and the row after it is
		// then the first; an unpark that comes after waits for the row
		// parked behind it to commit, and so passes the key on to it.
		head:     sql(`SELECT message_id FROM {p} WHERE consumer = ? AND {key} = ? ORDER BY seq LIMIT 1 LOCK IN SHARE MODE`),
		headLock: sql(`SELECT message_id, seq, waiting, retry_requested, taken_at IS NULL FROM {p} WHERE consumer = ? AND {key} = ? ORDER BY seq LIMIT 1 FOR UPDATE`),
		// The deletes of one key take turns: every row of the keys is
		// locked, in index order, before anything is deleted. Two that
		// overlap (an unpark of its first message, a discard of the next)
		// would otherwise each wait, in its release, for the row the
		// other deleted, and meet in a deadlock that InnoDB breaks by
		// rolling one back (the store runs it again).
		lockKeys:   sql(`SELECT seq FROM {p} WHERE consumer = ? AND {key} IN `),
		keysOf:     sql(`SELECT DISTINCT {key} FROM {p} WHERE consumer = ? AND {key} <> '' AND message_id IN `),
		pickDelete: sql(`SELECT message_id, {key}, seq FROM {p} WHERE consumer = ? AND message_id IN `),
		// SKIP LOCKED: a second process taking at the same time takes
		// other requests, or none, rather than waiting to find them
		// cleared. A waiting message is taken only as its key's first
		// (RequestRetry marks no other, but a retry requested before the
		// message ahead of it was parked again may remain). A taken one
		// is not taken again even if its retry is requested (by a client
		// older than taken_at): it is in a handler already.
		pickTake: sql(`SELECT p.message_id FROM {p} AS p WHERE p.consumer = ? AND p.retry_requested = TRUE AND p.taken_at IS NULL AND (NOT p.waiting OR ` + first + `)
ORDER BY p.parked_at LIMIT ? FOR UPDATE SKIP LOCKED`),
		// A taken message is in a handler: requested again, a second
		// process would take it.
		pickRetry:  sql(`SELECT p.message_id FROM {p} AS p WHERE p.consumer = ? AND p.taken_at IS NULL AND (NOT p.waiting OR ` + first + `)`),
		takeRows:   sql(`UPDATE {p} SET retry_requested = FALSE, taken_at = UTC_TIMESTAMP(6) WHERE consumer = ? AND message_id IN `),
		retryRows:  sql(`UPDATE {p} SET retry_requested = TRUE WHERE consumer = ? AND message_id IN `),
		deleteRows: sql(`DELETE FROM {p} WHERE consumer = ? AND message_id IN `),
		requestOne: sql(`UPDATE {p} SET retry_requested = TRUE WHERE consumer = ? AND message_id = ?`),
		takeOne:    sql(`UPDATE {p} SET retry_requested = FALSE, taken_at = UTC_TIMESTAMP(6) WHERE consumer = ? AND message_id = ?`),
		selectRows: sql(`SELECT ` + parkedColumns + `, NULL FROM {p} AS p WHERE p.consumer = ? AND p.message_id IN `),
		list: sql(`SELECT ` + selectCols + ` FROM {p} AS p WHERE (? = '' OR p.consumer = ?) AND p.message_id > ?
ORDER BY p.message_id, p.consumer LIMIT ?`),
		get: sql(`SELECT ` + selectCols + ` FROM {p} AS p WHERE (? = '' OR p.consumer = ?) AND p.message_id = ? ORDER BY p.consumer LIMIT 2`),
		// In place: the row keeps its seq, its place in its key's order.
		// A retry's end acts only on its own take: an operator may have
		// taken the message back and another process taken it.
		parkAgain: sql(`UPDATE {p} SET error = ?, attempts = ?, parked_at = UTC_TIMESTAMP(6), retry_requested = FALSE, waiting = FALSE, taken_at = NULL
WHERE consumer = ? AND message_id = ? AND taken_at = ?`),
		giveBack:  sql(`UPDATE {p} SET taken_at = NULL, retry_requested = TRUE WHERE consumer = ? AND message_id = ? AND taken_at = ?`),
		forget:    sql(`UPDATE {p} SET taken_at = NULL WHERE consumer = ? AND taken_at IS NOT NULL`),
		overtaken: sql(`UPDATE {p} SET overtaken = overtaken + 1 WHERE consumer = ? AND {key} = ?`),
		counts:    sql(`SELECT consumer, COUNT(*) FROM {p} GROUP BY consumer ORDER BY consumer`),
		// First of its key and waiting, yet nobody requested it nor took
		// it: nothing will apply it, nor the rest of its key.
		stalled: sql(`SELECT p.consumer, COUNT(*) FROM {p} AS p WHERE p.waiting AND NOT p.retry_requested AND p.taken_at IS NULL AND ` + first + `
GROUP BY p.consumer ORDER BY p.consumer`),
		taken:   sql(`SELECT consumer, COUNT(*) FROM {p} WHERE taken_at IS NOT NULL GROUP BY consumer ORDER BY consumer`),
		waiting: sql(`SELECT consumer, COUNT(*) FROM {p} WHERE waiting GROUP BY consumer ORDER BY consumer`),
	}
}

// inList returns "(?, ?, ...)" with n marks (n > 0).
func inList(n int) string { return "(" + placeholders(n) + ")" }
