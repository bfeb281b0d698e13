DROP INDEX {{schema}}.{{name:key_idx}};
