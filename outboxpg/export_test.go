package outboxpg

// Channel returns the NOTIFY channel of s, for tests that listen themselves.
func Channel(s *Store) string { return s.names.channel }

// PurgeLockKey returns the advisory lock key PurgePublished takes.
func PurgeLockKey(s *Store) int64 { return s.names.purgeLockKey }

// ChannelName is channelName, for tests of long names.
var ChannelName = channelName
