package outboxpg

// PublicationName returns the publication WatchWAL uses for s's table.
func PublicationName(s *Store) string { return s.names.publicationName() }

// SlotPrefix returns how the names of s's temporary slots start.
func SlotPrefix(s *Store) string { return s.names.slotPrefix() }
