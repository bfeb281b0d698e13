-- Paused topics: `outbox pause --topic T` adds a row, `outbox resume`
-- deletes it. Pausing moves the topic's pending messages out of the due
-- range (their available_at moves forward by outboxdriver.PauseShift,
-- keeping their schedule), so claims never read past them, and relays of
-- any release leave them alone; resuming moves them back. Relays read this
-- table about every second and postpone the same way a message of a paused
-- topic written after the pause. Times are the database's.
CREATE TABLE {{paused}} (
	topic      text        NOT NULL,
	paused_at  timestamptz NOT NULL DEFAULT now(),
	paused_by  text        NOT NULL,
	reason     text        NOT NULL,
	CONSTRAINT {{name:paused_pkey}} PRIMARY KEY (topic)
);
