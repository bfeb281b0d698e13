package outboxpg

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel returns the NOTIFY channel of s, for tests that listen themselves.
func Channel(s *Store) string { return s.names.channel }

// PurgeLockKey returns the advisory lock key PurgePublished takes.
func PurgeLockKey(s *Store) int64 { return s.names.purgeLockKey }

// ChannelName is channelName, for tests of long names.
var ChannelName = channelName

// RollBackHeld rolls back every claim s holds in a transaction
// (Options.TransactionLeases), as their leases ending would: tests that
// leave claims unsettled give their connections back to the pool with it.
func RollBackHeld(s *Store) { openClaims.rollBack(s) }

// HoldOn takes token's claim out of reach of every Store, its timer
// stopped, as a relay that hung would leave it, and returns its
// connection (nil if there is no such claim).
func HoldOn(token uuid.UUID) *pgxpool.Conn {
	claim := openClaims.take(token)
	if claim == nil {
		return nil
	}
	<-claim.conn.place // the caller owns the connection now
	return claim.conn.Conn
}

// ClaimSQL returns the claim statement of s, for tests that look at its
// plan.
func ClaimSQL(s *Store) string { return s.stmts.claim }
