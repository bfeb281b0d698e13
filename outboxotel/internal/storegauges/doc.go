// Package storegauges tests outboxotel's table gauges against the real
// stores, PostgreSQL (TEST_DATABASE_URL) and SQLite. It is a module of its
// own so that outboxotel's go.mod, which its users' module graphs include,
// needs neither store nor their database drivers.
package storegauges
