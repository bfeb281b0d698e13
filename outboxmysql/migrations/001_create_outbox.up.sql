-- The outbox table: one row per message, from write to publication (or dead
-- letter). Published rows are deleted, or kept with status 'published' for the
-- retention period. One statement, so that the migration is atomic although
-- MySQL commits each DDL statement by itself.
--
-- Times are DATETIME(6) in UTC, from UTC_TIMESTAMP(6) (the database's clock)
-- or from UTC strings the store formats: a DATETIME has no time zone, so
-- neither the session's time_zone nor the driver's loc changes what is stored.
--
-- id is the UUIDv7 in its 16 bytes (BINARY(16), not CHAR(36)): InnoDB
-- clusters the table on the primary key and copies it into every secondary
-- index entry, so 16 bytes instead of 36 keep every index smaller; the byte
-- order of a UUIDv7 is its time order, so inserts append to the clustered
-- index; and the order of the bytes is the order of uuid.UUID values, which
-- ListDead pages by. lease_token is a UUID too.
--
-- topic and key are VARBINARY: compared byte for byte, with no collation, so
-- 'A' and 'a', or 'a' and 'a ' (PAD SPACE collations ignore trailing spaces),
-- are different keys on MySQL and MariaDB alike. headers is the JSON object as
-- text (LONGTEXT, not JSON): MySQL's JSON type rewrites what it stores and
-- MariaDB's does not, and the store reads it back as the text it wrote.
--
-- seq numbers rows in insert order (AUTO_INCREMENT), for what needs insert
-- order rather than the order of ids, which come from the clocks of the
-- application's hosts.
CREATE TABLE {{table}} (
	id           BINARY(16)     NOT NULL,
	seq          BIGINT         NOT NULL AUTO_INCREMENT,
	topic        VARBINARY(1024) NOT NULL,
	`key`        VARBINARY(512) NOT NULL DEFAULT '',
	payload      LONGBLOB       NOT NULL,
	headers      LONGTEXT       CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
	created_at   DATETIME(6)    NOT NULL,
	status       VARCHAR(9)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'pending',
	available_at DATETIME(6)    NOT NULL,
	attempts     INT            NOT NULL DEFAULT 0,
	lease_token  BINARY(16)     NULL,
	locked_until DATETIME(6)    NULL,
	last_error   MEDIUMTEXT     CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
	published_at DATETIME(6)    NULL,
	CONSTRAINT {{name:pkey}} PRIMARY KEY (id),
	CONSTRAINT {{name:seq_key}} UNIQUE KEY (seq),
	CONSTRAINT {{name:status_check}} CHECK (status IN ('pending', 'published', 'dead')),
	-- The claim (status = 'pending' AND available_at <= now ORDER BY
	-- available_at, id LIMIT n) reads the first entries of this index, and
	-- the idle probe its first unleased one. MySQL has no partial indexes:
	-- status leads, so the pending rows are one range of it however many
	-- rows are kept or dead.
	--
	-- Writers are not blocked by claims. Under REPEATABLE READ a locking
	-- read takes next-key locks: a claim that reads past the last due
	-- entry locks the gap after it, which is where every new message (due
	-- now, so after every entry due before it) is inserted, and writers'
	-- INSERTs would wait for the claim's commit. So the store runs its
	-- claims at READ COMMITTED, where a locking read locks only the index
	-- records it returns, never the gaps, and SKIP LOCKED passes over the
	-- rows of uncommitted inserts and other claims instead of waiting.
	-- Settlements and leases find their rows by primary key equality,
	-- which takes record locks only at any isolation level.
	KEY {{name:pending_idx}} (status, available_at, id),
	-- The idle probe's leased part (the earliest lease end) and Stats'
	-- count of messages in flight read the leased rows only: unleased ones
	-- (locked_until NULL) sort first in the status range.
	KEY {{name:leased_idx}} (status, locked_until, available_at),
	-- Retention deletes the oldest published rows in bounded batches.
	KEY {{name:published_idx}} (status, published_at),
	-- Dead-letter listing pages by id, and Stats counts each status.
	KEY {{name:status_idx}} (status, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
