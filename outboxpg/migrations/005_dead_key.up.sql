-- In key order a dead message holds the rest of its key until it is retried
-- or discarded (unless Options.SkipDeadInKeyOrder). A claim asks, for each
-- candidate head, whether an earlier message of its key is dead, and ends a
-- run before the first dead message after its head; this index answers each
-- with one probe. Dead messages are few, so it costs little.
CREATE INDEX {{name:key_dead_idx}} ON {{table}} (key, seq) WHERE status = 'dead' AND key <> '';
