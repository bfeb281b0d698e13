ALTER TABLE {{table}}
	DROP KEY {{name:key_idx}},
	DROP COLUMN overtaken;
