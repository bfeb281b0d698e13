package outboxhttp

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary Standard Webhooks headers (id, timestamp,
// signatures), bodies, secrets and clocks to the receiver's check. It must
// never panic, answer only nil or an error wrapping ErrInvalidSignature that
// quotes little of the headers, accept only signatures holding the HMAC of
// "<id>.<timestamp>.<body>" with the secret at a timestamp within the
// tolerance, and accept what Sign made, next to any other signatures,
// exactly when that timestamp is within the tolerance and the id is usable.
func FuzzVerify(f *testing.F) {
	now := int64(1_780_000_000)
	id := "01890a5d-ac96-774b-bcce-b302099a8057"
	good := Sign([]byte("secret"), id, time.Unix(now, 0), []byte(`{"id":1}`))
	f.Add([]byte("secret"), []byte(`{"id":1}`), id, strconv.FormatInt(now, 10), good, now, now, uint32(0), int64(0))
	f.Add([]byte("secret"), []byte(`{"id":1}`), id, "1780000000", "v1a,next x", now, now+300, uint32(1), int64(0))
	f.Add([]byte("secret"), []byte(`{"id":1}`), "", "", "", now, now-301, uint32(0), int64(time.Minute))
	f.Add([]byte(nil), []byte(""), id, "1780000000", good, now, now, uint32(0), int64(-1))
	f.Add([]byte("k"), []byte("b"), "a.b", "1", "v1,zz v1,,", int64(0), int64(0), uint32(999_999_999), int64(time.Second))
	f.Add([]byte("k"), []byte("b"), "x", "nonsense", "nonsense", int64(-1), int64(1<<40), uint32(0), int64(1<<62))
	f.Add([]byte("k"), []byte("b"), "x", "1", "  v1,"+strings.Repeat("A", 43)+"=  \t v1,", int64(1), int64(1), uint32(0), int64(0))
	f.Add([]byte(strings.Repeat("s", 100)), []byte("b"), "msg", "+0001780000000", "v1,", now, now, uint32(0), int64(0))
	f.Fuzz(func(t *testing.T, secret, body []byte, id, ts, signatures string, signedAt, nowSec int64, nanos uint32, tolerance int64) {
		// Keep the clocks within ±2^40 s (35,000 years) and the tolerance
		// within a century, where time.Time and Duration arithmetic is exact.
		const maxTolerance = 100 * 365 * 24 * time.Hour
		signedAt, nowSec = signedAt%(1<<40), nowSec%(1<<40)
		tol := time.Duration(tolerance) % maxTolerance
		clock := time.Unix(nowSec, int64(nanos%1e9))
		effective := tol
		if effective <= 0 {
			effective = VerifyToleranceDefault
		}
		within := func(ts int64) bool {
			age := clock.Sub(time.Unix(ts, 0))
			return age <= effective && age >= -effective
		}
		usableID := id != "" && !strings.Contains(id, ".")

		// Any headers.
		err := verify(secret, id, ts, signatures, body, tol, clock)
		checkVerifyError(t, signatures, err)
		if err == nil {
			unix, perr := strconv.ParseInt(ts, 10, 64)
			if perr != nil || !usableID || len(secret) == 0 || !within(unix) || !signedBy(secret, id, ts, signatures, body) {
				t.Fatalf("verify accepted id %q, timestamp %q, signatures %q for body %q with secret %q at %v", id, ts, signatures, body, secret, clock)
			}
		}

		// What Sign made, alone and next to any other signatures.
		signedTS := strconv.FormatInt(signedAt, 10)
		sig := Sign(secret, id, time.Unix(signedAt, 0), body)
		want := len(secret) > 0 && usableID && within(signedAt)
		for _, sigs := range []string{sig, " " + sig + "  ", signatures + " " + sig, sig + " " + signatures} {
			err := verify(secret, id, signedTS, sigs, body, tol, clock)
			checkVerifyError(t, sigs, err)
			if (err == nil) != want {
				t.Fatalf("verify(%q, %q, %q) with secret %q at %v, tolerance %v: %v; want accepted = %v", id, signedTS, sigs, secret, clock, tol, err, want)
			}
		}
		if !want {
			return
		}
		// Nothing else passes with that signature.
		flipped := append([]byte(nil), secret...)
		flipped[len(flipped)/2] ^= 1
		for name, err := range map[string]error{
			"another body":      verify(secret, id, signedTS, sig, append(body[:len(body):len(body)], 'x'), tol, clock),
			"another secret":    verify(flipped, id, signedTS, sig, body, tol, clock),
			"another timestamp": verify(secret, id, strconv.FormatInt(signedAt+1, 10), sig, body, tol, clock),
			"another id":        verify(secret, id+"x", signedTS, sig, body, tol, clock),
		} {
			if err == nil {
				t.Fatalf("%s passes with %q (id %q, secret %q, body %q)", name, sig, id, secret, body)
			}
		}
	})
}

func checkVerifyError(t *testing.T, signatures string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("verify(%q) = %v, want ErrInvalidSignature", signatures, err)
	}
	if len(err.Error()) > 300 {
		t.Fatalf("verify(%q): a %d-byte error quotes too much of the headers: %s", signatures, len(err.Error()), err)
	}
}

// signedBy reports whether one of the space-separated v1 signatures is the
// HMAC of "<id>.<ts>.<body>" with secret.
func signedBy(secret []byte, id, ts, signatures string, body []byte) bool {
	want := mac(secret, id, ts, body)
	for _, s := range strings.Fields(signatures) {
		if v, enc, _ := strings.Cut(s, ","); v == "v1" {
			if b, err := base64.StdEncoding.DecodeString(enc); err == nil && hmac.Equal(b, want) {
				return true
			}
		}
	}
	return false
}

// FuzzParseRetryAfter feeds arbitrary Retry-After values, as an endpoint may
// send them: no panic, and a delay only when it is positive.
func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	for _, v := range []string{"", "0", "120", " 7 ", "-1", "1.5", "18446744073709551615", "99999999999999999999",
		now.Add(time.Hour).Format(http.TimeFormat), now.Add(-time.Hour).Format(http.TimeFormat),
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"} {
		f.Add(v, now.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, nowSec int64) {
		clock := time.Unix(nowSec%(1<<40), 0)
		d, ok := parseRetryAfter(v, clock)
		if !ok {
			if d != 0 {
				t.Fatalf("parseRetryAfter(%q) = %v, false", v, d)
			}
			return
		}
		if d <= 0 {
			t.Fatalf("parseRetryAfter(%q) at %v = %v, want a positive delay", v, clock, d)
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil && n < 1<<33 && d != time.Duration(n)*time.Second {
			t.Fatalf("parseRetryAfter(%q) = %v, want %d seconds", v, d, n)
		}
	})
}
