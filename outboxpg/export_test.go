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

// RollBackOpenClaims rolls back every open claim of s
// (Options.TransactionLeases), as their leases ending would: tests that
// leave claims unsettled give their connections back to the pool with it.
func RollBackOpenClaims(s *Store) { allOpenClaims.rollBack(s) }

// HangOpenClaim takes token's claim out of reach of every Store, its timer
// stopped, as a relay that hung would leave it, and returns its
// connection (nil if there is no such claim).
func HangOpenClaim(token uuid.UUID) *pgxpool.Conn {
	claim := allOpenClaims.take(token)
	if claim == nil {
		return nil
	}
	<-claim.conn.place // the caller owns the connection now
	return claim.conn.Conn
}

// ClaimSQL returns the claim statement of s, for tests that look at its
// plan.
func ClaimSQL(s *Store) string { return s.stmts.claim }
