DROP INDEX {{name:key_dead_idx}};
