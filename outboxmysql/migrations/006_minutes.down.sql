DROP TABLE {{minutes}};
