package outboxmysql

import (
	"context"
	"time"
)

// Now reads the store's clock, for the conformance suite's Harness.Now.
func Now(ctx context.Context, s *Store) (time.Time, error) { return s.now(ctx) }

// StatementsOf exposes the migrations' splitter.
var StatementsOf = statementsOf

// ClaimSQL is the claim's locking read; its one parameter is the limit.
func ClaimSQL(s *Store) string { return s.stmts.claimSelect }

// ClaimTxOptions are the options of the store's own transactions.
var ClaimTxOptions = readCommitted

// RollBackHeldClaims rolls back every held claim of s
// (Options.TransactionLeases), as their leases ending would: tests that
// leave claims unsettled end their transactions with it before their
// database is dropped.
func RollBackHeldClaims(s *Store) { allHeldClaims.rollBackHeld(s) }
