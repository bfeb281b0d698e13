DROP INDEX {{schema}}.{{name:key_idx}};
ALTER TABLE {{table}} DROP COLUMN seq;
