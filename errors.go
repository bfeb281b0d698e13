package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrInvalidMessage is wrapped by every *MessageError.
	ErrInvalidMessage = errors.New("outbox: invalid message")
	// ErrInvalidConfig is wrapped by every *ConfigError.
	ErrInvalidConfig = errors.New("outbox: invalid configuration")
	// ErrNotFound means no message has the given id (or none in the state the
	// operation needs, such as dead for a dead-letter retry).
	ErrNotFound = outboxdriver.ErrNotFound
	// ErrNotMigrated means the outbox table is missing or at an older
	// migration than this release needs: run `outbox migrate up` (or the
	// store's Migrator). Relay.Run returns an error wrapping it.
	ErrNotMigrated = outboxdriver.ErrNotMigrated
	// ErrRefused: see outboxdriver.ErrRefused.
	ErrRefused = outboxdriver.ErrRefused
	// ErrClosed is returned by a relay that was shut down, and matched (with
	// errors.Is) by every publisher's error for a message published after
	// its Close: see ClosedError.
	ErrClosed = errors.New("outbox: closed")
	// ErrPermanent is wrapped by errors made with Permanent.
	ErrPermanent = errors.New("permanent failure")
	// ErrUnavailable is in the chain of errors marked with Unavailable.
	ErrUnavailable = errors.New("destination unavailable")
)

// ClosedError returns an error with text that matches ErrClosed: the
// error a Publisher gives, retryable, for a message published after Close,
// so that callers recognise it whatever the publisher. Each broker package
// exports one as its ErrClosed.
func ClosedError(text string) error { return &closedError{text: text} }

type closedError struct{ text string }

func (e *closedError) Error() string        { return e.text }
func (e *closedError) Is(target error) bool { return target == ErrClosed }

// MessageError says which field of which message is invalid, and why.
type MessageError struct {
	// ID is the message id (zero if the writer had not assigned one yet).
	ID uuid.UUID
	// Topic is the message topic, to find the message in logs.
	Topic string
	// Field names the invalid field.
	Field string
	// Value is the offending value, shortened.
	Value string
	// Reason says what is wrong and how to fix it.
	Reason string
}

func invalidMessage(m *Message, field, value, reason string) error {
	return &MessageError{ID: m.ID, Topic: shorten(m.Topic), Field: field, Value: value, Reason: reason}
}

func (e *MessageError) Error() string {
	s := "outbox: invalid message"
	if e.ID != uuid.Nil {
		s += " " + e.ID.String()
	}
	if e.Topic != "" && e.Field != "Topic" {
		s += fmt.Sprintf(" (topic %q)", e.Topic)
	}
	if e.Value != "" {
		return fmt.Sprintf("%s: %s %q %s", s, e.Field, e.Value, e.Reason)
	}
	return fmt.Sprintf("%s: %s %s", s, e.Field, e.Reason)
}

// Unwrap lets errors.Is(err, ErrInvalidMessage) match.
func (e *MessageError) Unwrap() error { return ErrInvalidMessage }

// ConfigError names an invalid configuration field, its value and the fix.
type ConfigError struct {
	// Field is the configuration field, e.g. "Config.BatchSize".
	Field string
	// Value is the rejected value.
	Value any
	// Fix says what to do instead.
	Fix string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("outbox: invalid %s %v: %s", e.Field, e.Value, e.Fix)
}

// Unwrap lets errors.Is(err, ErrInvalidConfig) match.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() []error {
	return []error{e.err, ErrPermanent}
}

// Permanent marks err as permanent: a publisher or handler returns it for a
// message that no retry can deliver (an undecodable payload, a message the
// broker rejects as invalid). The relay dead-letters such a message at once.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	if IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// retryAfterError carries the shortest delay the destination accepts before
// the next attempt.
type retryAfterError struct {
	err   error
	delay time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as asking for a retry no sooner than d from now: a
// publisher returns it when the destination said when to come back (an HTTP
// Retry-After header, a broker's throttle time). The relay waits the longer
// of d and its own backoff delay. It changes nothing else: a permanent err
// stays permanent, and the attempt still counts towards MaxAttempts.
// RetryAfter(nil, d) is nil; with d <= 0 it returns err unchanged.
func RetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err: err, delay: d}
}

// RetryAfterOf returns the delay asked for with RetryAfter anywhere in err's
// chain (the outermost one if several), and whether there is one.
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.delay, true
	}
	return 0, false
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() []error {
	return []error{e.err, ErrUnavailable}
}

// Unavailable marks err as saying nothing about the message: the destination
// could not be reached at all (connection refused, broker down, no route),
// so the message was certainly not sent. The relay then counts no attempt:
// it records the error, postpones the message by the worker's pause and
// pauses the worker (100 ms, doubling up to 5 s) until the destination
// answers again, so an outage of any length dead-letters nothing. Mark only errors that prove the message did not
// leave; a timeout waiting for a confirmation is an ordinary failure.
// Permanent wins over Unavailable. Unavailable(nil) is nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err was marked with Unavailable.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// ErrHeldBack is in the chain of errors marked with HeldBack.
var ErrHeldBack = errors.New("held back, not tried")

type heldBackError struct{ err error }

func (e *heldBackError) Error() string { return e.err.Error() }
func (e *heldBackError) Unwrap() []error {
	return []error{e.err, ErrHeldBack}
}

// HeldBack marks err as the outcome of a message the publisher did not try
// to send: an earlier message of its key in the batch failed (sending it
// would break the key's order), or the destination asked to wait
// (RetryAfter). The relay counts no attempt for it: it hands the message
// back as it was, due again at once (in key order, behind the message that
// failed), or after the delay if err carries one (RetryAfter). The relay
// treats every failed message that follows a failure of its key in a batch
// so, whatever its error, since none of them can be published before the
// failed one. Permanent wins over HeldBack. HeldBack(nil) is nil.
func HeldBack(err error) error {
	if err == nil {
		return nil
	}
	return &heldBackError{err: err}
}

// IsHeldBack reports whether err was marked with HeldBack.
func IsHeldBack(err error) bool { return errors.Is(err, ErrHeldBack) }
