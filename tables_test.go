package outbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNewTablesRelayRefusesABadConfigurationNamingTheField(t *testing.T) {
	t.Parallel()
	pub := PublisherFunc(func(_ context.Context, ms []Message) []error { return make([]error, len(ms)) })
	for _, tc := range []struct {
		field string
		src   TableSource
		pub   Publisher
		cfg   TablesConfig
	}{
		{"NewTablesRelay source", nil, pub, TablesConfig{}},
		{"NewTablesRelay publisher", StaticTables{}, nil, TablesConfig{}},
		{"TablesConfig.RescanInterval", StaticTables{}, pub, TablesConfig{RescanInterval: -time.Second}},
		{"Config.BatchSize", StaticTables{}, pub, TablesConfig{Relay: Config{BatchSize: -1}}},
	} {
		_, err := NewTablesRelay(tc.src, tc.pub, tc.cfg)
		var cfgErr *ConfigError
		if !errors.As(err, &cfgErr) || cfgErr.Field != tc.field || cfgErr.Fix == "" {
			t.Errorf("NewTablesRelay with a bad %s: %v; want a *ConfigError naming %s with a fix", tc.field, err, tc.field)
		}
	}
}

func TestATablesRelayRunsOnceAndAShutdownBeforeRunIsSafe(t *testing.T) {
	t.Parallel()
	pub := PublisherFunc(func(_ context.Context, ms []Message) []error { return make([]error, len(ms)) })
	tr, err := NewTablesRelay(StaticTables{}, pub, TablesConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown before Run: %v", err)
	}
	if err := tr.Run(t.Context()); err != nil {
		t.Fatalf("Run after Shutdown: %v; want nil at once", err)
	}
	if err := tr.Run(t.Context()); err == nil {
		t.Fatal("a second Run returned nil; want an error")
	}
}
