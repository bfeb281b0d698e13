// Package txn ends the transactions that the stores run application code
// in. Beginning one differs from store to store (a pool, a *sql.DB, SQLite's
// write lock), as do the transaction types (pgx.Tx, *sql.Tx, a connection
// inside BEGIN IMMEDIATE); what follows is the same everywhere and is
// written once here: commit if fn succeeded, otherwise roll back, even when
// fn panics, so that no transaction is left open on a pooled connection.
package txn

// Run runs fn on tx, a transaction the caller has just begun, and ends it.
// If fn returns nil, Run commits with commit and returns commit's error. If
// fn returns an error, Run rolls back with rollback and returns fn's error as
// is. If fn (or commit) panics, Run rolls back and panics again with the
// same value.
//
// rollback must not depend on a context that may have ended: it also runs
// when the caller's context was cancelled mid-transaction.
func Run[T any](tx T, fn func(T) error, commit func(T) error, rollback func(T)) error {
	defer func() {
		if r := recover(); r != nil {
			rollback(tx)
			panic(r)
		}
	}()
	if err := fn(tx); err != nil {
		rollback(tx)
		return err
	}
	return commit(tx)
}
