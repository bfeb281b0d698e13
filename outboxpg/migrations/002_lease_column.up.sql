-- Claims become HOT updates. Until now a claim leased a message by moving its
-- indexed available_at to the end of the lease, so every claimed row was
-- written out whole again with a new entry in the primary key and pending
-- indexes: about 790 bytes of WAL per message. The lease now lives in a column
-- of its own that no index covers, and pages keep free space for the new row
-- versions, so PostgreSQL updates the row in place on its page (a heap-only
-- tuple) and logs only the changed bytes.
ALTER TABLE {{table}} ADD COLUMN locked_until timestamptz NULL;

-- A claim rewrites every row of a page at once, none of the old versions can
-- be pruned before the claim commits, and each new version is longer (24
-- bytes of lease): inserts leave 60 % of each page free so that all of them
-- fit, down to empty payloads (TestClaimsAreHeapOnlyUpdates). Only pages
-- written from now on get the free space.
ALTER TABLE {{table}} SET (fillfactor = 40);

-- Leases of rows claimed before this migration are carried over: their
-- available_at was the end of the lease.
UPDATE {{table}} SET locked_until = available_at
WHERE status = 'pending' AND lease_token IS NOT NULL AND available_at > now();
