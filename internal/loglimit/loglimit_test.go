package loglimit

import (
	"testing"
	"time"
)

func TestOneLinePerKeyAndInterval(t *testing.T) {
	l := &Limiter{Interval: time.Hour}
	if !l.Allow("a") || !l.Allow("b") {
		t.Fatal("the first line of each key must go through")
	}
	if l.Allow("a") {
		t.Fatal("a second line of key a within the interval went through")
	}
	l.Interval = 0
	if !l.Allow("a") {
		t.Fatal("with no interval every line must go through")
	}
}

func TestForgetsKeysPastTheBound(t *testing.T) {
	l := &Limiter{Interval: time.Hour}
	for i := range maxKeys + 1 {
		l.Allow(string(rune('a' + i)))
	}
	if len(l.last) > maxKeys {
		t.Fatalf("limiter remembers %d keys, more than %d", len(l.last), maxKeys)
	}
}
