-- The per-minute rollup behind the console's charts of the last hour: each
-- relay adds what it published and what failed to the row of the current
-- minute at each heartbeat, and one of them samples the pending count and
-- the oldest pending message's age into it, so that the charts never scan
-- the outbox table. Rows older than a day are deleted by the beats. Nothing
-- that claims or settles reads it. minute is microseconds since the Unix
-- epoch, at the start of the minute.
CREATE TABLE {{minutes}} (
	minute     INTEGER NOT NULL,
	published  INTEGER NOT NULL DEFAULT 0,
	failed     INTEGER NOT NULL DEFAULT 0,
	pending    INTEGER NULL,
	oldest_ms  INTEGER NULL,
	CONSTRAINT {{name:minutes_pkey}} PRIMARY KEY (minute)
) STRICT;
