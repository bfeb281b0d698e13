ALTER TABLE {{table}} DROP COLUMN overtaken;
