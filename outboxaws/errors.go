package outboxaws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/loglimit"
)

// ConfigErrorLogInterval is the shortest time between two ERROR logs of the
// same configuration error (a missing queue, access denied): every batch
// fails until an operator fixes it, and one line a minute tells them
// without flooding the log.
const ConfigErrorLogInterval = time.Minute

// ErrClosed is returned, for every message, by Publish after Close. It
// matches outbox.ErrClosed with errors.Is and is retryable: another relay
// instance, or this one after a restart, publishes the messages.
var ErrClosed = outbox.ClosedError("outboxaws: publisher closed")

// ErrNotFound means the queue or topic does not exist (or is in another
// region or account than the client's). It is a configuration error:
// retryable, counting an attempt, and logged at ERROR level with the fix.
var ErrNotFound = errors.New("the queue or topic does not exist")

// ErrAccessDenied means AWS refused the credentials or the permission to
// send. It is a configuration error: retryable, counting an attempt, and
// logged at ERROR level with the fix.
var ErrAccessDenied = errors.New("access denied")

// PublishError is the outcome of a message AWS did not take. A permanent
// one is wrapped by outbox.Permanent (test with outbox.IsPermanent);
// errors.As finds the *PublishError either way.
type PublishError struct {
	// ID is the outbox message id.
	ID uuid.UUID
	// Destination is the queue URL or topic ARN.
	Destination string
	// Err is the cause: an SDK or network error, a batch entry's error
	// (*EntryError), ErrTooLarge, ErrBadHeader, ErrNotFound,
	// ErrAccessDenied, ErrClosed or the context's error.
	Err error
}

// Error names the message, its destination and the cause.
func (e *PublishError) Error() string {
	return fmt.Sprintf("outboxaws: message %s to %s: %v", e.ID, e.Destination, e.Err)
}

// Unwrap returns the cause.
func (e *PublishError) Unwrap() error { return e.Err }

// EntryError is the failure AWS reported for one entry of a batch.
type EntryError struct {
	Code        string
	Message     string
	SenderFault bool
}

// Error gives the code and message.
func (e *EntryError) Error() string {
	return fmt.Sprintf("batch entry refused: %s: %s (sender's fault: %t)", e.Code, e.Message, e.SenderFault)
}

// The error codes, with the query protocol's and the JSON protocol's
// spelling, of what the operator fixes.
var (
	notFoundCodes = map[string]bool{
		"AWS.SimpleQueueService.NonExistentQueue": true, "QueueDoesNotExist": true,
		"NotFound": true, "NotFoundException": true, "ResourceNotFoundException": true,
	}
	deniedCodes = map[string]bool{
		"AccessDenied": true, "AccessDeniedException": true, "AuthorizationError": true,
		"InvalidClientTokenId": true, "UnrecognizedClientException": true, "SignatureDoesNotMatch": true,
		"ExpiredToken": true, "ExpiredTokenException": true, "InvalidSecurity": true,
		"KMS.AccessDeniedException": true, "KMSAccessDenied": true,
	}
	// kmsCodes are a key for server-side encryption that cannot be used:
	// disabled, deleted, in another state, or not opted in. The operator
	// fixes the key; until then every message fails alike.
	kmsCodes = map[string]bool{
		"KMS.DisabledException": true, "KMS.InvalidStateException": true, "KMS.NotFoundException": true,
		"KMS.OptInRequired": true, "KMS.InvalidKeyUsageException": true, "KMS.KeyUnavailableException": true,
		"KmsDisabled": true, "KmsInvalidState": true, "KmsNotFound": true, "KmsOptInRequired": true,
		"KmsInvalidKeyUsage": true, "KmsUnavailable": true,
		"KMSDisabled": true, "KMSInvalidState": true, "KMSNotFound": true, "KMSOptInRequired": true,
	}
	throttleCodes = map[string]bool{
		"RequestThrottled": true, "AWS.SimpleQueueService.RequestThrottled": true, "Throttled": true,
		"KmsThrottled": true, "KMS.ThrottlingException": true, "KMSThrottling": true,
	}
)

// base holds what both publishers share.
type base struct {
	cfg       Config
	configLog loglimit.Limiter

	mu     sync.RWMutex // held for reading by Publish, for writing by Close
	closed bool
}

// Close stops the publisher: later calls of Publish fail with ErrClosed. It
// waits for the Publish calls in flight. The SDK's clients hold nothing to
// close. Close is idempotent.
func (b *base) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

// enter starts a Publish of batch to dest: it keeps Close waiting until
// leave is called, and returns ctx bounded by Config.Timeout. Once the
// publisher is closed it fails every message in errs with ErrClosed and
// returns ok false (nothing to leave).
func (b *base) enter(ctx context.Context, batch []outbox.Message, dest string, errs []error) (_ context.Context, leave func(), ok bool) {
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		for i := range batch {
			errs[i] = &PublishError{ID: batch[i].ID, Destination: dest, Err: ErrClosed}
		}
		return ctx, nil, false
	}
	ctx, cancel := context.WithTimeoutCause(ctx, b.cfg.Timeout,
		fmt.Errorf("Config.Timeout (%v) expired: %w", b.cfg.Timeout, context.DeadlineExceeded))
	return ctx, func() { cancel(); b.mu.RUnlock() }, true
}

// classify marks e, a request's failure, by what a retry can do.
func (b *base) classify(ctx context.Context, e *PublishError, what string) error {
	var api smithy.APIError
	code := ""
	if errors.As(e.Err, &api) {
		code = api.ErrorCode()
	}
	switch {
	case isDialError(e.Err):
		return outbox.Unavailable(e)
	// Both wrap the SDK's error too: errors.As finds its code, which tells
	// credentials AWS does not know from a permission they lack.
	case notFoundCodes[code] || deniedCodes[code] || kmsCodes[code]:
		return b.configError(e, code, what)
	case isThrottle(code):
		return outbox.RetryAfter(e, b.cfg.ThrottleDelay)
	case ctx.Err() != nil && !errors.Is(e.Err, context.Cause(ctx)):
		e.Err = fmt.Errorf("%w (%v)", context.Cause(ctx), e.Err)
	}
	return e
}

// classifyEntry marks e, whose cause is an *EntryError, by what a retry
// can do: throttled entries wait, an entry refused as the sender's fault
// fails for good, the service's own faults are retryable.
func (b *base) classifyEntry(e *PublishError, ee *EntryError, what string) error {
	switch {
	case isThrottle(ee.Code):
		return outbox.RetryAfter(e, b.cfg.ThrottleDelay)
	case notFoundCodes[ee.Code] || deniedCodes[ee.Code] || kmsCodes[ee.Code]:
		return b.configError(e, ee.Code, what)
	case ee.SenderFault:
		return outbox.Permanent(e)
	}
	return e
}

// isThrottle reports whether code asks the sender to slow down.
func isThrottle(code string) bool {
	_, sdk := retry.DefaultThrottleErrorCodes[code]
	return sdk || throttleCodes[code]
}

func sendAction(what string) string {
	if what == "topic" {
		return "sns:Publish"
	}
	return "sqs:SendMessage"
}

// isDialError reports whether err is a failure to open a connection (or to
// find the host), which proves nothing was sent.
func isDialError(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}

// logConfigError logs err, a configuration error, with its fix at ERROR
// level, unless it was logged for dest within ConfigErrorLogInterval.
func (b *base) logConfigError(dest string, err error, fix string) {
	if !b.configLog.Allow(dest + "\x00" + fix) {
		return
	}
	b.cfg.Logger.Error("outboxaws: cannot publish until the configuration is fixed",
		slog.String("destination", dest), slog.String("fix", fix), slog.Any("error", err))
}

// configError marks e, refused with code (a missing queue or topic, refused
// credentials or permission, an unusable KMS key), as the configuration
// error it is: retryable (fixing it loses nothing) and logged at ERROR with
// the fix, at most once per ConfigErrorLogInterval.
func (b *base) configError(e *PublishError, code, what string) error {
	var fix string
	var sentinel error
	switch {
	case notFoundCodes[code]:
		fix, sentinel = fmt.Sprintf("create the %s %s, or correct its name, region or account", what, e.Destination), ErrNotFound
	case deniedCodes[code]:
		fix, sentinel = fmt.Sprintf("check the credentials (the SDK's chain: AWS_ACCESS_KEY_ID, AWS_PROFILE, the instance's role) and that they allow %s on %s", sendAction(what), e.Destination), ErrAccessDenied
	default:
		fix, sentinel = fmt.Sprintf("check the KMS key that encrypts the %s %s: enabled, in its region, and usable by the credentials (kms:GenerateDataKey, kms:Decrypt)", what, e.Destination), ErrAccessDenied
	}
	b.logConfigError(e.Destination, e.Err, fix)
	e.Err = fmt.Errorf("%w (%w); fix: %s", sentinel, e.Err, fix)
	return e
}
