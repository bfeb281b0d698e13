package outboxpg

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
