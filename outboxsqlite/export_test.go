package outboxsqlite

// OpenWith is openWith, for tests that wrap the driver's connector.
var OpenWith = openWith

// Path returns the database file of a Store from Open.
func Path(s *Store) string { return s.path }
