package outboxdriver

import (
	"context"
	"errors"
	"time"
)

// TopicPauser is implemented by stores that can pause a topic: its
// messages stay pending, visible as paused, and no relay publishes them
// until it is resumed; the other topics flow on. The paused topics are
// rows of the table <table>_paused. A table migrated before it existed has
// no such table: the methods then return an error wrapping ErrNotMigrated.
//
// Pausing moves the topic's pending messages out of the due range: their
// available_at moves forward by PauseShift, into the years from PausedFrom
// on, which keeps their schedule to move back by. So claims, which read
// due messages only, never read past a paused backlog, and relays of
// releases that know nothing of pausing leave it alone too. A message of a
// paused topic written after the pause is moved the same way by the relay
// that claims it (through a retry of PauseShift that counts no attempt),
// which in key order moves the rest of its key behind it, as a retry does.
// Resuming moves back every message from PausedFrom on that no paused
// topic holds: its own, and the rest of their keys.
type TopicPauser interface {
	// PauseTopic records topic as paused by whom, for reason, and moves
	// its pending messages out of the due range; it returns how many it
	// moved. Pausing a paused topic again moves what came since.
	PauseTopic(ctx context.Context, topic, by, reason string) (int, error)
	// ResumeTopic deletes topic's pause (none is no error) and moves back
	// every paused message that no paused topic holds any more (see
	// MoveBackUnpaused); it returns how many it moved.
	ResumeTopic(ctx context.Context, topic string) (int, error)
	// MoveBackUnpaused moves back every message from PausedFrom on whose
	// topic is not paused and which no earlier pending message of its key,
	// of a paused topic, holds; it returns how many it moved. Relays run it
	// for a while after they see a topic resumed: a retry of PauseShift
	// settled by a relay that had not yet seen the resume lands after it.
	MoveBackUnpaused(ctx context.Context) (int, error)
	// PausedTopics lists the paused topics, and the topics that are not
	// paused but still have messages from PausedFrom on (Resumed: held
	// behind a paused topic's message of their key, or left by a relay;
	// `outbox resume` moves them back), by topic.
	PausedTopics(ctx context.Context) ([]PausedTopic, error)
	// PausedTopicNames lists the names of the paused topics only: one
	// read of the small paused topics table, which relays make about
	// every second while they work (PausedTopics counts messages).
	PausedTopicNames(ctx context.Context) ([]string, error)
	// PausedAmong returns which of topics are paused. If a pause or resume
	// of one of them is under way, it returns an error wrapping
	// ErrPauseChanging at once instead of waiting. A relay asks it after a
	// settlement that postponed messages for a pause (a resume's move back
	// may have begun before the settlement committed), and moves back what
	// a resume it now sees missed; while a change is under way, it asks
	// again at its next heartbeat.
	PausedAmong(ctx context.Context, topics []string) ([]string, error)
}

// ErrPauseChanging is returned by TopicPauser.PausedAmong while a pause or
// resume of one of its topics is under way.
var ErrPauseChanging = errors.New("outboxdriver: a pause or resume of the topic is under way")

// PausedTopic is a paused topic, as a store lists it.
type PausedTopic struct {
	Topic string
	// Resumed says the topic is not paused: it is listed because it has
	// messages from PausedFrom on.
	Resumed bool
	// At, By and Reason say when, by whom and why it was paused (zero if
	// Resumed).
	At     time.Time
	By     string
	Reason string
	// Messages counts its pending messages moved out of the due range.
	Messages int64
}

// PauseShift is how far pausing moves a message's available_at forward: a
// little over 250 years, so that every real due time lands after
// PausedFrom. Resuming moves it back as far.
const PauseShift = 91_400 * 24 * time.Hour

// PausedFrom is where the paused due times begin: no real message is due
// this late (the writer refuses an AvailableAt from it on), and every due
// time from 1950 on, moved by PauseShift, lands after it.
var PausedFrom = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)
