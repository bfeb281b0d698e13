package outboxhttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// VerifyToleranceDefault is how far the signature's timestamp may be from the
// receiver's clock when Verify is given a tolerance of zero: long enough for
// clock skew and a slow request, short enough to limit replays.
const VerifyToleranceDefault = 5 * time.Minute

// ErrInvalidSignature is wrapped by every error Verify returns.
var ErrInvalidSignature = errors.New("outboxhttp: invalid signature")

// Sign returns the value of the Outbox-Signature header for body sent at t
// with secret: "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<unix seconds>.<body>">".
// The publisher calls it for every request; receivers can use it to build
// signed requests in their tests.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks the Outbox-Signature header value of a request whose body is
// body: one of its v1 signatures must be the HMAC-SHA256 of "<t>.<body>" with
// secret, and its timestamp t must be within tolerance of the receiver's
// clock (VerifyToleranceDefault if tolerance <= 0), which bounds how long a
// captured request can be replayed. Pass the body exactly as received, before
// any decoding. Fields other than t and v1 are ignored, so a later scheme can
// be added next to v1. Every error wraps ErrInvalidSignature; answer it with
// 401, and the publisher dead-letters the message.
func Verify(secret []byte, header string, body []byte, tolerance time.Duration) error {
	return verify(secret, header, body, tolerance, time.Now())
}

func verify(secret []byte, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if len(secret) == 0 {
		// An empty key would accept signatures anyone can compute.
		return fmt.Errorf("%w: the secret is empty", ErrInvalidSignature)
	}
	if tolerance <= 0 {
		tolerance = VerifyToleranceDefault
	}
	if strings.TrimSpace(header) == "" {
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderSignature)
	}
	var (
		ts         string
		signatures [][]byte
	)
	for field := range strings.SplitSeq(header, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok {
			return fmt.Errorf("%w: field %q is not name=value", ErrInvalidSignature, shortened(field))
		}
		switch name {
		case "t":
			if ts != "" {
				return fmt.Errorf("%w: more than one timestamp", ErrInvalidSignature)
			}
			ts = value
		case "v1":
			if sig, err := hex.DecodeString(value); err == nil && len(sig) == sha256.Size {
				signatures = append(signatures, sig)
			}
		}
	}
	if ts == "" {
		return fmt.Errorf("%w: no timestamp (t=)", ErrInvalidSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not a number of seconds", ErrInvalidSignature, shortened(ts))
	}
	if len(signatures) == 0 {
		return fmt.Errorf("%w: no v1 signature of 64 hex digits", ErrInvalidSignature)
	}
	want := mac(secret, ts, body)
	matched := false
	for _, sig := range signatures {
		// Compare with every signature, in constant time each.
		if hmac.Equal(sig, want) {
			matched = true
		}
	}
	if !matched {
		return fmt.Errorf("%w: no v1 signature matches the body and the secret", ErrInvalidSignature)
	}
	// Checked after the signature, so an attacker learns nothing from it.
	if age := now.Sub(time.Unix(unix, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: timestamp %d is %v away from now, over the tolerance of %v", ErrInvalidSignature, unix, age.Round(time.Second), tolerance)
	}
	return nil
}

func shortened(s string) string {
	const max = 32
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
