-- A relay that skips dead messages in key order (Options.SkipDeadInKeyOrder)
-- publishes later messages of a key past its dead one. Published rows are
-- deleted, so how many went past is counted when they are settled, on the
-- dead messages themselves: `outbox dead retry` asks for --force before
-- publishing one after the messages that overtook it. Relays that hold
-- their keys never write it.
--
-- A constant default: SQLite records it in the schema and rewrites no row.
ALTER TABLE {{table}} ADD COLUMN overtaken INTEGER NOT NULL DEFAULT 0;
