-- The lease moves out of available_at into a column of its own, as in
-- outboxpg's migration 2. Until now a claim leased a message by moving its
-- available_at to the end of the lease, so a message whose lease ran out (its
-- relay crashed or stalled) came back behind every message that had become
-- due in the meantime. available_at now keeps the due time, and such a message
-- is claimed again in its old place in the queue. locked_until is the end of
-- the lease, NULL when the message is not leased.
ALTER TABLE {{table}} ADD COLUMN locked_until INTEGER NULL;

-- Leases taken before this migration are carried over: a leased row has a
-- lease token and available_at, the end of its lease, in the future. The time
-- it was due is gone, but it was before the claim, hence before now: the row
-- keeps its lease and is due now, which is the nearest place to its old one
-- that the row tells.
UPDATE {{table}}
SET locked_until = available_at, available_at = CAST(unixepoch('subsec') * 1000000 AS INTEGER)
WHERE status = 'pending' AND lease_token IS NOT NULL
	AND available_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER);

-- The idle probe (the earliest lease end among leased messages) and the count
-- of messages in flight read the few leased rows from this index rather than
-- every pending row from the table.
CREATE INDEX {{name:leased_idx}} ON {{table}} (locked_until) WHERE status = 'pending' AND locked_until IS NOT NULL;
