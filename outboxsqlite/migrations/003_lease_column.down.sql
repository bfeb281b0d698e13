-- Leases in force go back into available_at, where versions 1 and 2 keep them:
-- the row is due again when its lease ends.
UPDATE {{table}} SET available_at = max(available_at, locked_until)
WHERE status = 'pending' AND lease_token IS NOT NULL
	AND locked_until > CAST(unixepoch('subsec') * 1000000 AS INTEGER);

DROP INDEX {{name:leased_idx}};
ALTER TABLE {{table}} DROP COLUMN locked_until;
