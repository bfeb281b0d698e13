-- The outbox table: one row per message, from write to publication (or dead
-- letter). Published rows are deleted, or kept with status 'published' for the
-- retention period. Times are microseconds since the Unix epoch (UTC), so they
-- compare and sort as integers; ids and lease tokens are UUIDs in their
-- canonical text form, whose order is the order of their bytes.

CREATE TABLE {{table}} (
	id           TEXT    NOT NULL,
	topic        TEXT    NOT NULL,
	key          TEXT    NOT NULL DEFAULT '',
	payload      BLOB    NOT NULL,
	headers      TEXT    NULL,
	created_at   INTEGER NOT NULL,
	status       TEXT    NOT NULL DEFAULT 'pending',
	available_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000000 AS INTEGER)),
	attempts     INTEGER NOT NULL DEFAULT 0,
	lease_token  TEXT    NULL,
	last_error   TEXT    NULL,
	published_at INTEGER NULL,
	CONSTRAINT {{name:pkey}} PRIMARY KEY (id),
	CONSTRAINT {{name:status_check}} CHECK (status IN ('pending', 'published', 'dead'))
) STRICT;

-- The claim (ORDER BY available_at, id ... LIMIT) and the idle probe
-- (min(available_at)) read the first entries of this index. It holds pending
-- rows only, so it stays small however many rows are kept or dead.
CREATE INDEX {{name:pending_idx}} ON {{table}} (available_at, id) WHERE status = 'pending';

-- Dead-letter listing pages by id.
CREATE INDEX {{name:dead_idx}} ON {{table}} (id) WHERE status = 'dead';

-- Retention deletes the oldest published rows in bounded batches.
CREATE INDEX {{name:published_idx}} ON {{table}} (published_at) WHERE status = 'published';
