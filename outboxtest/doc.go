// Package outboxtest helps an application test its use of the outbox: what
// a transaction wrote (RequireWritten, RequireEvent), what a relay publishes
// (Drain with a Recorder), and how a consumer's handler copes with the
// broker's redeliveries (Deliver).
//
// The throwaway databases these helpers read come from outboxpgtest (a
// PostgreSQL database per test, cloned from a migrated template) and
// outboxsqlitetest (an SQLite file per test); each gives a Table for the
// assertions and a Store for Drain. The package itself needs no database
// driver.
//
// It is for applications. People who write a store or a publisher prove it
// with the conformance suites (storetest, publishertest) instead.
package outboxtest
