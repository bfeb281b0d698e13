-- Claims in key order (Options.OrderByKey) publish each key's messages in seq
-- order, the order the database inserted them (AUTO_INCREMENT), not the order
-- of their ids, which come from the clocks of the application's hosts.
--
-- key_idx answers every question a claim in key order asks of a key, with
-- one probe each: its head (the pending message with the least seq), whether
-- an earlier message of a candidate's key is pending, the next messages of a
-- run, and the walk from key to key (GROUP BY status, key with MIN(seq) reads
-- one entry per key, a loose index scan). MySQL has no partial indexes: status
-- leads, so the same index is the key dead index too: whether a dead message
-- of the key comes before a candidate, and where a run's dead floor is
-- (status = 'dead'), for a claim that holds keys behind dead messages
-- (docs/design/key-order-claim.md §8) and for Stats.BehindDead. Dead messages
-- are few, so their part of it costs little.
--
-- overtaken counts, on a dead message, the later messages of its key that a
-- relay skipping dead messages in key order (Options.SkipDeadInKeyOrder)
-- published past it: published rows are deleted, so the count is kept when
-- they are settled. `outbox dead retry` asks for --force before publishing
-- the dead message after them. Relays that hold their keys never write it.
--
-- One statement, so the migration is applied whole or not at all.
ALTER TABLE {{table}}
	ADD COLUMN overtaken INT NOT NULL DEFAULT 0,
	ADD KEY {{name:key_idx}} (status, `key`, seq);
