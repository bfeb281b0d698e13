-- The relay registry: each running relay keeps a row here and refreshes it
-- every heartbeat interval (outbox.Config.HeartbeatInterval), so that
-- `outbox status` and the console list the live relays and flag a table with
-- pending messages and none. A relay that stops cleanly deletes its row; a
-- dead one's goes stale, and a later beat deletes it after a day. Nothing
-- that claims or settles messages reads it, so relays of older releases,
-- which do not register, work beside it. Times are microseconds since the
-- Unix epoch, as in the outbox table.
CREATE TABLE {{relays}} (
	id               TEXT    NOT NULL,
	host             TEXT    NOT NULL,
	pid              INTEGER NOT NULL,
	version          TEXT    NOT NULL,
	config           TEXT    NOT NULL,
	interval_ms      INTEGER NOT NULL,
	started_at       INTEGER NOT NULL,
	seen_at          INTEGER NOT NULL,
	last_claim_at    INTEGER NULL,
	last_publish_at  INTEGER NULL,
	CONSTRAINT {{name:relays_pkey}} PRIMARY KEY (id)
) STRICT;
