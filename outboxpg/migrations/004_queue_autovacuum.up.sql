-- The outbox is a queue: every row is inserted, updated by its claim and its
-- outcome, and deleted (or, with retention, deleted later), so the table
-- churns through its whole content again and again. PostgreSQL's defaults
-- suit tables that change a little at a time: autovacuum waits until a fifth
-- of the table is dead and then works slowly (a 2 ms pause every 200 cost
-- units), so under a steady load dead rows pile up faster than it removes
-- them and the table and its indexes keep growing.
--
-- These storage parameters, on this table only, make autovacuum start after a
-- fixed number of dead rows, whatever the table's size, and run without
-- pauses, as queue tables need. How often it looks at the table is still the
-- cluster's autovacuum_naptime (default 1 min).
ALTER TABLE {{table}} SET (
	autovacuum_vacuum_scale_factor = 0,
	autovacuum_vacuum_threshold = 10000,
	autovacuum_vacuum_cost_delay = 0,
	autovacuum_analyze_scale_factor = 0,
	autovacuum_analyze_threshold = 10000
);
