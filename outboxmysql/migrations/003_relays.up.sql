-- The relay registry: each running relay keeps a row here and refreshes it
-- every heartbeat interval (outbox.Config.HeartbeatInterval), so that
-- `outbox status` and the console list the live relays and flag a table with
-- pending messages and none. A relay that stops cleanly deletes its row; a
-- dead one's goes stale, and a later beat deletes it after a day. Nothing
-- that claims or settles messages reads it, so relays of older releases,
-- which do not register, work beside it. Times are the database's, in UTC,
-- as in the outbox table; id is the relay's run id in its 16 bytes.
CREATE TABLE {{relays}} (
	id               BINARY(16)  NOT NULL,
	host             TEXT        NOT NULL,
	pid              INT         NOT NULL,
	version          TEXT        NOT NULL,
	config           MEDIUMTEXT  NOT NULL,
	interval_ms      BIGINT      NOT NULL,
	started_at       DATETIME(6) NOT NULL,
	seen_at          DATETIME(6) NOT NULL,
	last_claim_at    DATETIME(6) NULL,
	last_publish_at  DATETIME(6) NULL,
	CONSTRAINT {{name:relays_pkey}} PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
