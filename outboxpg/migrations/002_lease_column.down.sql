-- Leases go back into available_at, where version 1 keeps them.
UPDATE {{table}} SET available_at = locked_until
WHERE status = 'pending' AND lease_token IS NOT NULL AND locked_until > now();

ALTER TABLE {{table}} RESET (fillfactor);
ALTER TABLE {{table}} DROP COLUMN locked_until;
