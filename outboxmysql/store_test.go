package outboxmysql_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return harness(t, newStore(t, outboxmysql.Options{}))
	})
}

func TestConformanceWithAnotherTableName(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		return harness(t, newStore(t, outboxmysql.Options{Table: "order"}))
	})
}

func TestNewRejectsInvalidOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  outboxmysql.Options
		value string
	}{
		{"upper-case table", outboxmysql.Options{Table: "Outbox"}, "Outbox"},
		{"table starting with a digit", outboxmysql.Options{Table: "1st"}, "1st"},
		{"table with a backtick", outboxmysql.Options{Table: "x`; DROP TABLE users; --"}, "DROP TABLE"},
		{"table with a dot", outboxmysql.Options{Table: "shop.outbox"}, "shop.outbox"},
		{"table of 41 bytes", outboxmysql.Options{Table: strings.Repeat("t", 41)}, strings.Repeat("t", 41)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			check := func(what string, err error) {
				t.Helper()
				var ce *outbox.ConfigError
				if !errors.As(err, &ce) || !errors.Is(err, outbox.ErrInvalidConfig) {
					t.Fatalf("%s(%+v): error %v; want an *outbox.ConfigError", what, tt.opts, err)
				}
				if !strings.Contains(ce.Field, "Options.Table") || !strings.Contains(fmt.Sprint(ce.Value), tt.value) || ce.Fix == "" {
					t.Fatalf("%s(%+v): %q; want it to name the field, the value %q and the fix", what, tt.opts, err, tt.value)
				}
			}
			_, err := outboxmysql.New(&sql.DB{}, tt.opts)
			check("New", err)
			_, err = outboxmysql.NewMigrator(nil, tt.opts)
			check("NewMigrator", err)
		})
	}
	if _, err := outboxmysql.New(nil, outboxmysql.Options{}); err == nil {
		t.Fatalf("New(nil): no error; want one")
	}
}
