package outbox

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzMessageValidation feeds arbitrary fields to the validation every write
// runs: it must never panic, and whatever it accepts must be storable and
// routable by every store and broker.
func FuzzMessageValidation(f *testing.F) {
	f.Add("orders.created", "order-1", "content-type", "application/json", []byte(`{"id":1}`))
	f.Add("", "", "", "", []byte(nil))
	f.Add("a\x00b", "k\x00", "bad name", "v", []byte{0xff})
	f.Add(strings.Repeat("t", MaxTopicLength+1), "k", "x-trace", "00-abc", []byte("x"))
	f.Add("t", "k", "h\xff", "\xff", []byte("x"))
	f.Add("t", "k", "NATS-expected-stream", "other", []byte("x"))
	f.Fuzz(func(t *testing.T, topic, key, header, value string, payload []byte) {
		m := Message{Topic: topic, Key: key, Payload: payload, Headers: map[string]string{header: value}}
		err := validateMessage(&m, payloadLimit(1<<10))
		if err != nil {
			if _, ok := err.(*MessageError); !ok {
				t.Fatalf("validate returned %T, want *MessageError", err)
			}
			return
		}
		switch {
		case topic == "" || len(topic) > MaxTopicLength || !utf8.ValidString(topic) || hasControl(topic):
			t.Fatalf("accepted topic %q", topic)
		case len(key) > MaxKeyLength || !utf8.ValidString(key) || hasNUL(key):
			t.Fatalf("accepted key %q", key)
		case len(payload) > 1<<10:
			t.Fatalf("accepted a %d-byte payload over the 1 KiB limit", len(payload))
		case ValidateHeaderName(header) != nil || !utf8.ValidString(value) || hasNUL(value) || len(value) > MaxHeaderValueBytesDefault:
			t.Fatalf("accepted header %q: %q", header, value)
		}
	})
}

// FuzzConfigValidation feeds arbitrary relay configurations to the validation
// NewRelay runs. It must never panic; a rejected configuration gets a
// *ConfigError naming the field and the value in effect; an accepted one must
// give the relay only usable values: every interval and timeout it derives
// is positive and within its bound, and drawing retry delays cannot panic.
func FuzzConfigValidation(f *testing.F) {
	type durations = [6]time.Duration // ActivePollInterval, BackoffBase, BackoffMax, LeaseDuration, PollInterval, Retention
	add := func(d durations, batchSize, maxAttempts, retentionBatch, workers int, wait time.Duration) {
		f.Add(int64(d[0]), int64(d[1]), int64(d[2]), int64(d[3]), int64(d[4]), int64(d[5]), batchSize, maxAttempts, retentionBatch, workers, int64(wait))
	}
	add(durations{}, 0, 0, 0, 0, time.Second)
	add(durations{10 * time.Millisecond, time.Second, 10 * time.Minute, 30 * time.Second, time.Second, time.Hour}, 100, 12, 1000, 2, time.Millisecond)
	add(durations{-1, -1, -1, -1, -1, -1}, -1, -1, -1, -1, -1)
	add(durations{time.Minute, time.Hour, time.Minute, time.Millisecond, time.Second, 0}, 10001, 0, 0, 1001, 0)
	add(durations{0, 0, 0, 99 * time.Millisecond, 5 * time.Millisecond, 0}, 10000, 1, 1, 1000, 0)
	const maxDuration = time.Duration(math.MaxInt64)
	add(durations{0, 0, 0, 1_100_000_000_000_000_000, 0, 0}, 0, 0, 0, 0, 0) // lease*9 overflows
	add(durations{maxDuration, maxDuration, maxDuration, maxDuration, maxDuration, maxDuration}, 1, math.MaxInt, math.MaxInt, 1, math.MaxInt64)
	f.Fuzz(func(t *testing.T, activePoll, backoffBase, backoffMax, lease, poll, retention int64,
		batchSize, maxAttempts, retentionBatch, workers int, wait int64) {
		in := Config{
			ActivePollInterval: time.Duration(activePoll),
			BackoffBase:        time.Duration(backoffBase),
			BackoffMax:         time.Duration(backoffMax),
			BatchSize:          batchSize,
			LeaseDuration:      time.Duration(lease),
			MaxAttempts:        maxAttempts,
			PollInterval:       time.Duration(poll),
			Retention:          time.Duration(retention),
			RetentionBatch:     retentionBatch,
			Workers:            workers,
		}
		c, err := in.withDefaults()
		if (err == nil) != (in.Validate() == nil) {
			t.Fatalf("Validate and withDefaults disagree on %+v: %v", in, err)
		}
		if err != nil {
			checkConfigError(t, in, err)
			return
		}
		checkUsableConfig(t, in, c, time.Duration(wait))
	})
}

// configDefaults maps each defaulted field of Config to its default.
var configDefaults = map[string]any{
	"ActivePollInterval": ActivePollIntervalDefault,
	"BackoffBase":        BackoffBaseDefault,
	"BackoffMax":         BackoffMaxDefault,
	"BatchSize":          BatchSizeDefault,
	"LeaseDuration":      LeaseDurationDefault,
	"MaxAttempts":        MaxAttemptsDefault,
	"PollInterval":       PollIntervalDefault,
	"Retention":          time.Duration(RetentionDefault),
	"RetentionBatch":     RetentionBatchDefault,
	"Workers":            WorkersDefault,
}

func checkConfigError(t *testing.T, in Config, err error) {
	t.Helper()
	ce, ok := err.(*ConfigError)
	if !ok || !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("%+v: error %T %v, want a *ConfigError wrapping ErrInvalidConfig", in, err, err)
	}
	name, ok := strings.CutPrefix(ce.Field, "Config.")
	field := reflect.ValueOf(in).FieldByName(name)
	if !ok || !field.IsValid() {
		t.Fatalf("%+v: error %q names no field of Config: %q", in, err, ce.Field)
	}
	// The value in effect: the one given, or the default it replaced.
	want := field.Interface()
	if field.IsZero() {
		want = configDefaults[name]
	}
	if ce.Value != want {
		t.Fatalf("%+v: error %q shows the value %v, but %s is %v", in, err, ce.Value, ce.Field, want)
	}
	if msg := err.Error(); !strings.Contains(msg, ce.Field+" "+fmt.Sprint(ce.Value)+":") || ce.Fix == "" || !strings.HasSuffix(msg, ce.Fix) {
		t.Fatalf("%+v: error %q must name the field, its value and the fix", in, msg)
	}
}

func checkUsableConfig(t *testing.T, in, c Config, wait time.Duration) {
	t.Helper()
	// Defaults fill zero fields only.
	inV, cV := reflect.ValueOf(in), reflect.ValueOf(c)
	for name, def := range configDefaults {
		got, given := cV.FieldByName(name).Interface(), inV.FieldByName(name)
		if given.IsZero() && got != def || !given.IsZero() && got != given.Interface() {
			t.Fatalf("%+v: %s became %v", in, name, got)
		}
	}
	switch {
	case c.Logger == nil:
		t.Fatalf("%+v: no logger", in)
	case c.BatchSize < 1 || c.BatchSize > 10000, c.Workers < 1 || c.Workers > 1000, c.MaxAttempts < 1, c.RetentionBatch < 1:
		t.Fatalf("%+v: accepted counts batch %d, workers %d, attempts %d, retention batch %d", in, c.BatchSize, c.Workers, c.MaxAttempts, c.RetentionBatch)
	case c.LeaseDuration < 100*time.Millisecond, c.Retention < 0:
		t.Fatalf("%+v: accepted lease %v, retention %v", in, c.LeaseDuration, c.Retention)
	case c.ActivePollInterval <= 0 || c.PollInterval < c.ActivePollInterval:
		t.Fatalf("%+v: polls after %v, then up to %v", in, c.ActivePollInterval, c.PollInterval)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		t.Fatalf("%+v: backoff from %v up to %v", in, c.BackoffBase, c.BackoffMax)
	}

	// Publishing must stop before the lease ends, and have time to run.
	if d := publishTimeout(c.LeaseDuration); d <= 0 || d >= c.LeaseDuration {
		t.Fatalf("lease %v: publishing may take %v", c.LeaseDuration, d)
	}

	// The dispatcher's waits: from ActivePollInterval, doubling, up to
	// PollInterval in a bounded number of idle polls.
	d := c.ActivePollInterval
	for i := 0; d < c.PollInterval; i++ {
		next := backOffPoll(d, c.PollInterval)
		if next <= d || next > c.PollInterval || i > 64 {
			t.Fatalf("poll %v..%v: after a wait of %v comes %v", c.ActivePollInterval, c.PollInterval, d, next)
		}
		d = next
	}
	if next := backOffPoll(c.PollInterval, c.PollInterval); next != c.PollInterval {
		t.Fatalf("poll interval %v: idle waits grow to %v", c.PollInterval, next)
	}
	if wait > 0 {
		if next := lookAgainIn(wait, c.PollInterval); next <= 0 || min(next, c.PollInterval) <= 0 {
			t.Fatalf("poll interval %v, next message due in %v: next look in %v", c.PollInterval, wait, next)
		}
	}

	// Retry delays: capped by a cap that grows from BackoffBase to
	// BackoffMax; drawing one never panics. Past 64 doublings the cap no
	// longer changes.
	prev := time.Duration(0)
	for attempt := 1; attempt <= min(c.MaxAttempts, 70); attempt++ {
		capped := BackoffCap(c.BackoffBase, c.BackoffMax, attempt)
		if capped < prev || capped > c.BackoffMax || attempt == 1 && capped != c.BackoffBase {
			t.Fatalf("backoff %v..%v: attempt %d capped at %v after %v", c.BackoffBase, c.BackoffMax, attempt, capped, prev)
		}
		if delay := fullJitter(c.BackoffBase, c.BackoffMax, attempt); delay < 0 || delay > capped {
			t.Fatalf("backoff %v..%v: attempt %d waits %v, over its cap %v", c.BackoffBase, c.BackoffMax, attempt, delay, capped)
		}
		prev = capped
	}
	// And drawn over the whole range below the cap, not fixed: of 64 draws
	// some lie in each half (a false failure: 2·2^-64).
	for _, attempt := range []int{1, min(c.MaxAttempts, 70)} {
		capped := BackoffCap(c.BackoffBase, c.BackoffMax, attempt)
		low, high := false, false
		for range 64 {
			d := fullJitter(c.BackoffBase, c.BackoffMax, attempt)
			low = low || d <= capped/2
			high = high || d > capped/2
		}
		if !low || !high {
			t.Fatalf("backoff %v..%v: attempt %d draws its delays only in the %s half of [0, %v]; want full jitter", c.BackoffBase, c.BackoffMax, attempt, map[bool]string{true: "lower", false: "upper"}[low], capped)
		}
	}
}
