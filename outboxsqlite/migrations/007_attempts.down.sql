DROP TABLE {{attempts}};
