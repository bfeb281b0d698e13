-- The history of failed attempts: the relay records each failure (its
-- time, error, class and what followed) after the settlement that carried
-- it, keeping the last 10 of each message, so that `outbox dead show` and
-- the console tell more than the last error. Records of messages no longer
-- in the table are purged by the relays. Nothing that claims or settles
-- reads it; relays of older releases record nothing. Times are
-- microseconds since the Unix epoch.
CREATE TABLE {{attempts}} (
	message_id  TEXT    NOT NULL,
	attempt     INTEGER NOT NULL,
	at          INTEGER NOT NULL,
	outcome     TEXT    NOT NULL,
	class       TEXT    NOT NULL,
	error       TEXT    NOT NULL,
	CONSTRAINT {{name:attempts_pkey}} PRIMARY KEY (message_id, attempt)
) STRICT;
