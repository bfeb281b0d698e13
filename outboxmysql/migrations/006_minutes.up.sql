-- The per-minute rollup behind the console's charts of the last hour: each
-- relay adds what it published and what failed to the row of the current
-- minute (by the database's clock, in UTC) at each heartbeat, and one of
-- them samples the pending count and the oldest pending message's age into
-- it, so that the charts never scan the outbox table. Rows older than a day
-- are deleted by the beats. Nothing that claims or settles reads it.
CREATE TABLE {{minutes}} (
	minute     DATETIME NOT NULL,
	published  BIGINT   NOT NULL DEFAULT 0,
	failed     BIGINT   NOT NULL DEFAULT 0,
	pending    BIGINT   NULL,
	oldest_ms  BIGINT   NULL,
	CONSTRAINT {{name:minutes_pkey}} PRIMARY KEY (minute)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
