DROP INDEX {{name:key_idx}};
