-- Claims in key order (Options.OrderByKey) publish each key's messages in the
-- order the database inserted them. seq records that order: the identity is
-- drawn at INSERT, by the database, so it does not depend on the clocks of
-- the application's hosts, as the ids (UUIDv7) do. Adding it fills the
-- column for every existing row: the table is locked while this runs.
ALTER TABLE {{table}} ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;

-- A claim in key order asks, for each candidate message, whether an earlier
-- message of its key is still pending. This index answers with one probe. It
-- holds pending messages with a key only, so tables whose messages have no
-- key pay nothing for it.
CREATE INDEX {{name:key_idx}} ON {{table}} (key, seq) WHERE status = 'pending' AND key <> '';
