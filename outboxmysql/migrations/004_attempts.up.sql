-- The history of failed attempts: the relay records each failure (its
-- time, error, class and what followed) after the settlement that carried
-- it, keeping the last 10 of each message, so that `outbox dead show` and
-- the console tell more than the last error. Records of messages no longer
-- in the table are purged by the relays. Nothing that claims or settles
-- reads it; relays of older releases record nothing. message_id is the
-- message's id in its 16 bytes, as in the outbox table.
CREATE TABLE {{attempts}} (
	message_id  BINARY(16)  NOT NULL,
	attempt     INT         NOT NULL,
	at          DATETIME(6) NOT NULL,
	outcome     VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	class       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	error       MEDIUMTEXT  NOT NULL,
	CONSTRAINT {{name:attempts_pkey}} PRIMARY KEY (message_id, attempt)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
