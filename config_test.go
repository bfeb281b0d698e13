package outbox

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConfigZeroValueTakesEveryDocumentedDefault(t *testing.T) {
	t.Parallel()
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatalf("Config{}.withDefaults() = %v", err)
	}
	want := Config{
		ActivePollInterval: ActivePollIntervalDefault,
		BackoffBase:        BackoffBaseDefault,
		BackoffMax:         BackoffMaxDefault,
		BatchSize:          BatchSizeDefault,
		HeartbeatInterval:  HeartbeatIntervalDefault,
		LeaseDuration:      LeaseDurationDefault,
		MaxAttempts:        MaxAttemptsDefault,
		PauseCheckInterval: PauseCheckIntervalDefault,
		PollInterval:       PollIntervalDefault,
		Retention:          RetentionDefault,
		RetentionBatch:     RetentionBatchDefault,
		Workers:            WorkersDefault,
		Logger:             c.Logger,
		Observer:           noObserver{},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults = %+v, want %+v", c, want)
	}
	if c.Logger == nil {
		t.Fatal("default Logger is nil")
	}
}

func TestConfigValidationNamesFieldValueAndFix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{BatchSize: -1}, "Config.BatchSize"},
		{Config{BatchSize: 10001}, "Config.BatchSize"},
		{Config{Workers: -2}, "Config.Workers"},
		{Config{LeaseDuration: time.Millisecond}, "Config.LeaseDuration"},
		{Config{LeaseDuration: -time.Second}, "Config.LeaseDuration"},
		{Config{MaxAttempts: -1}, "Config.MaxAttempts"},
		{Config{BackoffBase: -1}, "Config.BackoffBase"},
		{Config{BackoffMax: -1}, "Config.BackoffMax"},
		{Config{BackoffBase: time.Hour, BackoffMax: time.Minute}, "Config.BackoffMax"},
		{Config{PollInterval: -1}, "Config.PollInterval"},
		{Config{ActivePollInterval: -1}, "Config.ActivePollInterval"},
		{Config{ActivePollInterval: time.Minute, PollInterval: time.Second}, "Config.ActivePollInterval"},
		{Config{Retention: -time.Hour}, "Config.Retention"},
		{Config{RetentionBatch: -5}, "Config.RetentionBatch"},
		{Config{PauseCheckInterval: -1}, "Config.PauseCheckInterval"},
		{Config{TopicRateLimits: map[string]float64{"orders": 0}}, `Config.TopicRateLimits["orders"]`},
		{Config{TopicRateLimits: map[string]float64{"orders": -3}}, `Config.TopicRateLimits["orders"]`},
		{Config{TopicRateLimits: map[string]float64{"": 5}}, `Config.TopicRateLimits[""]`},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error for %s", tt.cfg, tt.field)
		}
		_, err := tt.cfg.withDefaults()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field {
			t.Errorf("withDefaults(%+v) = %v, want a ConfigError for %s", tt.cfg, err, tt.field)
			continue
		}
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) || ce.Fix == "" {
			t.Errorf("error %q must wrap ErrInvalidConfig, name %s and say how to fix it", err, tt.field)
		}
	}
}

func TestNewRelayRejectsInvalidConfigAndNilArguments(t *testing.T) {
	t.Parallel()
	if _, err := NewRelay(nil, &Handlers{}, Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewRelay(nil store) = %v, want ErrInvalidConfig", err)
	}
	if _, err := NewWriter[any](nil, WriterConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewWriter(nil) = %v, want ErrInvalidConfig", err)
	}
}

func TestBackoffCapDoublesFromBaseUpToMax(t *testing.T) {
	t.Parallel()
	base, max := time.Second, 10*time.Second
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := BackoffCap(base, max, i+1); got != w {
			t.Errorf("BackoffCap(attempt %d) = %v, want %v", i+1, got, w)
		}
	}
	if got := BackoffCap(base, time.Hour, 200); got != time.Hour {
		t.Errorf("BackoffCap(attempt 200) = %v, want the max without overflow", got)
	}
	checkFullJitter(t, base, max, 3, 1000)
}

// checkFullJitter draws n delays after attempt and fails unless they lie
// within [0, cap] and spread over it: some in each quarter, so neither a
// fixed delay (no jitter), nor none (no backoff), nor a delay drawn from
// part of the range only passes. A false failure needs all n draws to miss
// one quarter: 4·(3/4)^n, under 1e-120 for n = 1000.
func checkFullJitter(t *testing.T, base, max time.Duration, attempt, n int) {
	t.Helper()
	c := BackoffCap(base, max, attempt)
	var quarters [4]int
	for range n {
		d := fullJitter(base, max, attempt)
		if d < 0 || d > c {
			t.Fatalf("fullJitter(%v, %v, attempt %d) = %v, want within [0, %v]", base, max, attempt, d, c)
		}
		quarters[min(int(4*float64(d)/float64(c)), 3)]++
	}
	for q, k := range quarters {
		if k == 0 {
			t.Fatalf("fullJitter(%v, %v, attempt %d): of %d delays, %v fell in the quarters of [0, %v]; none in quarter %d, want them uniform over the range", base, max, attempt, n, quarters, c, q+1)
		}
	}
}
