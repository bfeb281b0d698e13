-- The outbox table: one row per message, from write to publication (or dead
-- letter). Published rows are deleted, or kept with status 'published' for the
-- retention period.

CREATE TABLE {{table}} (
	id           uuid        NOT NULL,
	topic        text        NOT NULL,
	key          text        NOT NULL DEFAULT '',
	payload      bytea       NOT NULL,
	headers      jsonb       NULL,
	created_at   timestamptz NOT NULL,
	status       text        NOT NULL DEFAULT 'pending',
	available_at timestamptz NOT NULL DEFAULT now(),
	attempts     integer     NOT NULL DEFAULT 0,
	lease_token  uuid        NULL,
	last_error   text        NULL,
	published_at timestamptz NULL,
	CONSTRAINT {{name:pkey}} PRIMARY KEY (id),
	CONSTRAINT {{name:status_check}} CHECK (status IN ('pending', 'published', 'dead'))
);

-- The claim (ORDER BY available_at, id ... LIMIT) and the idle probe
-- (min(available_at)) read the first entries of this index. It holds pending
-- rows only, so it stays small however many rows are kept or dead.
CREATE INDEX {{name:pending_idx}} ON {{table}} (available_at, id) WHERE status = 'pending';

-- Dead-letter listing pages by id.
CREATE INDEX {{name:dead_idx}} ON {{table}} (id) WHERE status = 'dead';

-- Retention deletes the oldest published rows in bounded batches.
CREATE INDEX {{name:published_idx}} ON {{table}} (published_at) WHERE status = 'published';
