-- Claims in key order (Options.OrderByKey) ask, for each candidate message,
-- whether an earlier message of its key is still pending. This index answers
-- with one probe. It holds pending messages with a key only, so tables whose
-- messages have no key pay nothing for it.
CREATE INDEX {{name:key_idx}} ON {{table}} (key, id) WHERE status = 'pending' AND key <> '';
