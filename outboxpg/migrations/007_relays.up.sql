-- The relay registry: each running relay keeps a row here and refreshes it
-- every heartbeat interval (outbox.Config.HeartbeatInterval), so that
-- `outbox status` and the console list the live relays and flag a table with
-- pending messages and none. A relay that stops cleanly deletes its row; a
-- dead one's goes stale, and a later beat deletes it after a day. Nothing
-- that claims or settles messages reads it, so relays of older releases,
-- which do not register, work beside it. Times are the database's.
CREATE TABLE {{relays}} (
	id               uuid        NOT NULL,
	host             text        NOT NULL,
	pid              integer     NOT NULL,
	version          text        NOT NULL,
	config           text        NOT NULL,
	interval_ms      bigint      NOT NULL,
	started_at       timestamptz NOT NULL,
	seen_at          timestamptz NOT NULL,
	last_claim_at    timestamptz NULL,
	last_publish_at  timestamptz NULL,
	CONSTRAINT {{name:relays_pkey}} PRIMARY KEY (id)
);
