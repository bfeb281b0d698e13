-- Drops the outbox table, its indexes and every message in it.
DROP TABLE {{table}};
