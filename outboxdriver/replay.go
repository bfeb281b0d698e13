package outboxdriver

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Replayer is implemented by stores that can publish again messages
// already published, which they keep while the relay's Retention lasts.
// A replayed message keeps its id, so consumers with an inbox skip what
// they had applied: a replay is for a consumer that lost messages (a
// restored database, a bug that dropped them), not to apply them twice.
type Replayer interface {
	// Replay makes up to limit kept published messages that match f
	// pending again, oldest first (in key order, each key's replayed
	// messages go before its newer pending ones), with their attempts
	// reset, and returns how many. With dryRun it changes nothing and
	// returns how many match in all. Messages whose expiry (the
	// Outbox-Expires-At header) passed never match: replayed, they would
	// only be dead-lettered as expired.
	Replay(ctx context.Context, f ReplayFilter, limit int, dryRun bool) (int, error)
}

// ReplayFilter chooses the published messages to replay. Zero fields
// choose everything; set fields must all match.
type ReplayFilter struct {
	Topic string
	Key   string
	// WrittenFrom and WrittenBefore bound the messages' CreatedAt.
	WrittenFrom   time.Time
	WrittenBefore time.Time
	IDs           []uuid.UUID
}
