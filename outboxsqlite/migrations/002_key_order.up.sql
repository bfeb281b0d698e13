-- Claims in key order (Options.OrderByKey) publish each key's messages in the
-- order the database inserted them: their rowid order (SQLite writes one
-- transaction at a time, so rowids ascend with commits), not the order of
-- their ids, which come from the clocks of the application's hosts. A claim
-- asks, for each candidate message, whether an earlier message of its key is
-- still pending; this index (its entries carry the rowid) answers with one
-- probe. It holds pending messages with a key only, so tables whose messages
-- have no key pay nothing for it.
CREATE INDEX {{name:key_idx}} ON {{table}} (key) WHERE status = 'pending' AND key <> '';
