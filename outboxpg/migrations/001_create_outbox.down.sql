-- Drops the outbox table with every message in it. The schema is left alone:
-- other tables may live in it.
DROP TABLE {{table}};
