package backoff

import (
	"context"
	"testing"
	"time"
)

func TestCapDoublesFromBaseUpToMax(t *testing.T) {
	t.Parallel()
	base, max := 100*time.Millisecond, 2*time.Second
	want := []time.Duration{100, 100, 200, 400, 800, 1600, 2000, 2000}
	for n, w := range want { // n = 0 counts as 1
		if got := Cap(base, max, n); got != w*time.Millisecond {
			t.Errorf("Cap(%v, %v, %d) = %v, want %v", base, max, n, got, w*time.Millisecond)
		}
	}
	if got := Cap(time.Second, time.Hour, 1000); got != time.Hour {
		t.Errorf("Cap(1s, 1h, 1000) = %v, want the max without overflow", got)
	}
}

func TestBackoffDoublesUpToMaxAndResets(t *testing.T) {
	t.Parallel()
	done, cancel := context.WithCancel(context.Background())
	cancel() // Sleep returns at once; the schedule advances all the same
	b := New(time.Microsecond, 10*time.Microsecond)
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i, w := range want {
		if got := b.Next(); got != w*time.Microsecond {
			t.Fatalf("pause %d = %v, want %v", i, got, w*time.Microsecond)
		}
		b.Sleep(done, nil)
	}
	b.Reset()
	if got := b.Next(); got != time.Microsecond {
		t.Errorf("after Reset the pause is %v, want the minimum 1µs", got)
	}
	// Near the largest Duration, doubling must cap instead of overflowing.
	huge := New(1<<62, 1<<63-1)
	huge.Sleep(done, nil)
	if got := huge.Next(); got != 1<<63-1 {
		t.Errorf("after doubling 2^62 the pause is %v, want the max", got)
	}
}

func TestSleepWaitsForThePause(t *testing.T) {
	t.Parallel()
	b := New(20*time.Millisecond, time.Second)
	start := time.Now()
	if !b.Sleep(context.Background(), nil) {
		t.Fatal("Sleep = false without ctx ending or stop closing")
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("Sleep returned after %v, want at least the 20ms pause", took)
	}
}

func TestSleepStopsEarly(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	close(stop)
	if New(time.Hour, time.Hour).Sleep(context.Background(), stop) {
		t.Error("Sleep = true with stop closed, want false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if New(time.Hour, time.Hour).Sleep(ctx, nil) {
		t.Error("Sleep = true with ctx done, want false")
	}
}

func TestJitterStaysBetweenHalfAndWholePause(t *testing.T) {
	t.Parallel()
	b := NewJittered(time.Millisecond, time.Second)
	plain := New(time.Millisecond, time.Second)
	seen := map[bool]bool{}
	for range 1000 {
		d := b.pause()
		if d < b.Next()/2 || d > b.Next() {
			t.Fatalf("jittered pause %v, want within [%v, %v]", d, b.Next()/2, b.Next())
		}
		seen[d == b.Next()] = true
		if got := plain.pause(); got != plain.Next() {
			t.Fatalf("pause without jitter = %v, want exactly %v", got, plain.Next())
		}
	}
	if !seen[false] {
		t.Error("1000 jittered pauses all equal to the whole pause: no jitter")
	}
}
