DROP INDEX {{schema}}.{{name:key_dead_idx}};
