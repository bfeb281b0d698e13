DROP TABLE {{relays}};
