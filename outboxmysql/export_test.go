package outboxmysql

import (
	"context"
	"time"
)

// Now reads the store's clock, for the conformance suite's Harness.Now.
func Now(ctx context.Context, s *Store) (time.Time, error) { return s.now(ctx) }

// StatementsOf exposes the migrations' splitter.
var StatementsOf = statementsOf
