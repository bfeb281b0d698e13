DROP TABLE {{paused}};
