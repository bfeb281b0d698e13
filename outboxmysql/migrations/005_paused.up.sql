-- Paused topics: `outbox pause --topic T` adds a row, `outbox resume`
-- deletes it. Pausing moves the topic's pending messages out of the due
-- range (their available_at moves forward by outboxdriver.PauseShift,
-- keeping their schedule), so claims never read past them, and relays of
-- any release leave them alone; resuming moves them back. Relays read this
-- table about every second and postpone the same way a message of a paused
-- topic written after the pause. topic is VARBINARY like the outbox
-- table's, compared byte for byte. Times are the database's, in UTC.
CREATE TABLE {{paused}} (
	topic      VARBINARY(1024) NOT NULL,
	paused_at  DATETIME(6)     NOT NULL,
	paused_by  TEXT            NOT NULL,
	reason     TEXT            NOT NULL,
	CONSTRAINT {{name:paused_pkey}} PRIMARY KEY (topic)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
