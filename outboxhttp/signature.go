package outboxhttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// SecretMinLength is the fewest bytes Config.Secret may have. The Standard
// Webhooks specification asks for 24 to 64 random bytes; 32 is a good choice.
const SecretMinLength = 16

// SecretPrefix starts a secret written as text the Standard Webhooks way:
// "whsec_" followed by the base64 of the key bytes. See ParseSecret.
const SecretPrefix = "whsec_"

// VerifyToleranceDefault is how far the signature's timestamp may be from the
// receiver's clock when Verify is given a tolerance of zero: long enough for
// clock skew and a slow request, short enough to limit replays.
const VerifyToleranceDefault = 5 * time.Minute

var (
	// ErrInvalidSecret is wrapped by every error ParseSecret returns.
	ErrInvalidSecret = errors.New("outboxhttp: invalid secret")
	// ErrInvalidSignature is wrapped by every error Verify returns.
	ErrInvalidSignature = errors.New("outboxhttp: invalid signature")
)

// ParseSecret returns the key bytes of a secret written as "whsec_" followed
// by their base64 (standard alphabet, padded or not), the form Standard
// Webhooks providers and tools print. Spaces around it are ignored. Errors
// wrap ErrInvalidSecret and never show the secret. It does not check the
// length; New does (SecretMinLength).
func ParseSecret(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	encoded, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%w: it does not start with %s; write it as %s followed by the base64 of the key bytes", ErrInvalidSecret, SecretPrefix, SecretPrefix)
	}
	if encoded == "" {
		return nil, fmt.Errorf("%w: nothing follows %s; add the base64 of the key bytes", ErrInvalidSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		if key, err = base64.RawStdEncoding.DecodeString(encoded); err != nil {
			// The decoder's error shows an offset only, but say it plainly.
			return nil, fmt.Errorf("%w: what follows %s is not standard base64 (A-Z, a-z, 0-9, + and /, = padding)", ErrInvalidSecret, SecretPrefix)
		}
	}
	return key, nil
}

// Sign returns the value of the Webhook-Signature header, in the Standard
// Webhooks form "v1,<base64 of the HMAC-SHA256>", for a request with the
// Webhook-Id id, sent at t (Webhook-Timestamp: t's unix seconds) with body:
// the HMAC, keyed with secret, covers "<id>.<unix seconds>.<body>". The
// publisher calls it for every request; receivers can use it to build signed
// requests in their tests.
func Sign(secret []byte, id string, t time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(mac(secret, id, strconv.FormatInt(t.Unix(), 10), body))
}

func mac(secret []byte, id, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks the Standard Webhooks signature of a request with header and
// body: one of the space-separated v1 signatures of Webhook-Signature must be
// the HMAC-SHA256, keyed with secret, of "<Webhook-Id>.<Webhook-Timestamp>.<body>",
// and the timestamp (unix seconds) must be within tolerance of the
// receiver's clock (VerifyToleranceDefault if tolerance <= 0), which bounds
// how long a captured request can be replayed. The id is signed, so a
// replay cannot pass under another id: deduplicating on Webhook-Id (the
// message id) stops replays within the tolerance. Pass the body exactly as
// received, before any decoding. Signatures of other versions (v1a) and
// malformed ones are skipped. To rotate secrets, verify with the new secret,
// then with the old one. Every error wraps ErrInvalidSignature; answer it
// with 401, which the publisher retries as a configuration error.
func Verify(secret []byte, header http.Header, body []byte, tolerance time.Duration) error {
	return verify(secret, header.Get(HeaderWebhookID), header.Get(HeaderWebhookTimestamp), header.Get(HeaderWebhookSignature), body, tolerance, time.Now())
}

func verify(secret []byte, id, ts, signatures string, body []byte, tolerance time.Duration, now time.Time) error {
	if len(secret) == 0 {
		// An empty key would accept signatures anyone can compute.
		return fmt.Errorf("%w: the secret is empty", ErrInvalidSignature)
	}
	if tolerance <= 0 {
		tolerance = VerifyToleranceDefault
	}
	switch {
	case id == "":
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderWebhookID)
	case strings.Contains(id, "."):
		// "<id>.<ts>.<body>" would not say where the id ends: a signature
		// could be moved to another id, timestamp and body.
		return fmt.Errorf("%w: %s %q has a dot", ErrInvalidSignature, HeaderWebhookID, shortened(id))
	case ts == "":
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderWebhookTimestamp)
	case strings.TrimSpace(signatures) == "":
		return fmt.Errorf("%w: no %s header", ErrInvalidSignature, HeaderWebhookSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not a number of seconds", ErrInvalidSignature, HeaderWebhookTimestamp, shortened(ts))
	}
	want := mac(secret, id, ts, body)
	found, matched := false, false
	for sig := range strings.FieldsSeq(signatures) {
		version, encoded, _ := strings.Cut(sig, ",")
		if version != "v1" {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(encoded)
		if err != nil || len(b) != sha256.Size {
			continue
		}
		found = true
		// Compare with every signature, in constant time each.
		if hmac.Equal(b, want) {
			matched = true
		}
	}
	if !found {
		return fmt.Errorf("%w: no v1 signature (v1,<base64 of 32 bytes>) in %s", ErrInvalidSignature, HeaderWebhookSignature)
	}
	if !matched {
		return fmt.Errorf("%w: no v1 signature matches the id, the timestamp, the body and the secret", ErrInvalidSignature)
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
