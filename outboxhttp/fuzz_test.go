package outboxhttp

import (
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary Outbox-Signature headers, bodies, secrets and
// clocks to the receiver's check. It must never panic, answer only nil or an
// error wrapping ErrInvalidSignature that quotes little of the header, accept
// only a header holding the HMAC of the body with the secret at a timestamp
// within the tolerance, and accept what Sign made, next to any other fields,
// exactly when that timestamp is within the tolerance.
func FuzzVerify(f *testing.F) {
	now := int64(1_780_000_000)
	good := Sign([]byte("secret"), time.Unix(now, 0), []byte(`{"id":1}`))
	f.Add([]byte("secret"), []byte(`{"id":1}`), good, now, now, uint32(0), int64(0))
	f.Add([]byte("secret"), []byte(`{"id":1}`), "v2=next,x=1", now, now+300, uint32(1), int64(0))
	f.Add([]byte("secret"), []byte(`{"id":1}`), "", now, now-301, uint32(0), int64(time.Minute))
	f.Add([]byte(nil), []byte(""), good, now, now, uint32(0), int64(-1))
	f.Add([]byte("k"), []byte("b"), "t=1,t=2,v1=zz", int64(0), int64(0), uint32(999_999_999), int64(time.Second))
	f.Add([]byte("k"), []byte("b"), "nonsense", int64(-1), int64(1<<40), uint32(0), int64(1<<62))
	f.Add([]byte("k"), []byte("b"), " t = 1 , v1="+strings.Repeat("0", 64)+", ,", int64(1), int64(1), uint32(0), int64(0))
	f.Add([]byte(strings.Repeat("s", 100)), []byte("b"), "t=+0001780000000,v1=", now, now, uint32(0), int64(0))
	f.Fuzz(func(t *testing.T, secret, body []byte, header string, signedAt, nowSec int64, nanos uint32, tolerance int64) {
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

		// Any header.
		err := verify(secret, header, body, tol, clock)
		checkVerifyError(t, header, err)
		if err == nil {
			ts, ok := signedTimestamp(secret, header, body)
			if !ok || len(secret) == 0 || !within(ts) {
				t.Fatalf("verify accepted %q for body %q with secret %q at %v", header, body, secret, clock)
			}
		}

		// What Sign made, alone and next to other name=value fields.
		signed := Sign(secret, time.Unix(signedAt, 0), body)
		want := len(secret) > 0 && within(signedAt)
		headers := []string{signed, " " + strings.ReplaceAll(signed, ",", " , ") + " "}
		if otherFields(header) {
			headers = append(headers, header+","+signed, signed+","+header)
		}
		for _, h := range headers {
			err := verify(secret, h, body, tol, clock)
			checkVerifyError(t, h, err)
			if (err == nil) != want {
				t.Fatalf("verify(%q) with secret %q at %v, tolerance %v: %v; want accepted = %v", h, secret, clock, tol, err, want)
			}
		}
		if !want {
			return
		}
		// Nothing else passes with that signature.
		flipped := append([]byte(nil), secret...)
		flipped[len(flipped)/2] ^= 1
		forged := strings.Replace(signed, "t="+strconv.FormatInt(signedAt, 10)+",", "t="+strconv.FormatInt(signedAt+1, 10)+",", 1)
		for name, err := range map[string]error{
			"another body":      verify(secret, signed, append(body[:len(body):len(body)], 'x'), tol, clock),
			"another secret":    verify(flipped, signed, body, tol, clock),
			"another timestamp": verify(secret, forged, body, tol, clock),
		} {
			if err == nil {
				t.Fatalf("%s passes with %q (secret %q, body %q)", name, signed, secret, body)
			}
		}
	})
}

func checkVerifyError(t *testing.T, header string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if !errors.Is(err, ErrInvalidSignature) {
		t.Fatalf("verify(%q) = %v, want ErrInvalidSignature", header, err)
	}
	if len(err.Error()) > 300 {
		t.Fatalf("verify(%q): a %d-byte error quotes too much of the header: %s", header, len(err.Error()), err)
	}
}

// signedTimestamp returns the t= of header if one of its v1= fields is the
// HMAC of body at that timestamp with secret.
func signedTimestamp(secret []byte, header string, body []byte) (int64, bool) {
	var ts string
	var sigs []string
	for field := range strings.SplitSeq(header, ",") {
		name, value, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch name {
		case "t":
			ts = value
		case "v1":
			sigs = append(sigs, value)
		}
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, false
	}
	for _, s := range sigs {
		if sig, err := hex.DecodeString(s); err == nil && hmac.Equal(sig, mac(secret, ts, body)) {
			return unix, true
		}
	}
	return 0, false
}

// otherFields reports whether header is a list of name=value fields that
// Verify ignores (neither t nor v1), which may stand next to a signature.
func otherFields(header string) bool {
	for field := range strings.SplitSeq(header, ",") {
		name, _, ok := strings.Cut(strings.TrimSpace(field), "=")
		if !ok || name == "t" || name == "v1" {
			return false
		}
	}
	return true
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
