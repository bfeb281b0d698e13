package outboxmysql_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxmysql"
)

// beforeSideTables is the last migration before the tables beside the
// outbox table (3 to 6).
const beforeSideTables = 2

func TestSideTablesOfATableMigratedBeforeThemWrapErrNotMigratedNamingTheMigrationAndTheFix(t *testing.T) {
	t.Parallel()
	db := mysqltest.DB(t)
	m, err := outboxmysql.NewMigrator(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.To(t.Context(), beforeSideTables); err != nil {
		t.Fatalf("migrate to %d: %v", beforeSideTables, err)
	}
	s, err := outboxmysql.New(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	id := uuid.New()
	calls := []struct {
		name, table string
		migration   int
		call        func() error
	}{
		{"BeatRelay", "outbox_relays", 3, func() error {
			return s.BeatRelay(ctx, outboxdriver.RelayBeat{ID: id, Interval: time.Second, Forget: time.Hour, SinceClaim: -1, SincePublish: -1})
		}},
		{"RemoveRelay", "outbox_relays", 3, func() error { return s.RemoveRelay(ctx, id) }},
		{"Relays", "outbox_relays", 3, func() error { _, _, err := s.Relays(ctx); return err }},
		{"RecordAttempts", "outbox_attempts", 4, func() error {
			return s.RecordAttempts(ctx, []outboxdriver.Attempt{{MessageID: id, Number: 1, Outcome: outboxdriver.AttemptRetried, Class: outboxdriver.ClassRetryable}})
		}},
		{"Attempts", "outbox_attempts", 4, func() error { _, err := s.Attempts(ctx, id); return err }},
		{"ForgetAttempts", "outbox_attempts", 4, func() error { return s.ForgetAttempts(ctx, []uuid.UUID{id}) }},
		{"LastFailures", "outbox_attempts", 4, func() error { _, err := s.LastFailures(ctx, []uuid.UUID{id}); return err }},
		{"PurgeAttempts", "outbox_attempts", 4, func() error { _, err := s.PurgeAttempts(ctx, 10); return err }},
		{"PauseTopic", "outbox_paused", 5, func() error { _, err := s.PauseTopic(ctx, "t", "me", "why"); return err }},
		{"ResumeTopic", "outbox_paused", 5, func() error { _, err := s.ResumeTopic(ctx, "t"); return err }},
		{"MoveBackUnpaused", "outbox_paused", 5, func() error { _, err := s.MoveBackUnpaused(ctx); return err }},
		{"PausedTopics", "outbox_paused", 5, func() error { _, err := s.PausedTopics(ctx); return err }},
		{"PausedTopicNames", "outbox_paused", 5, func() error { _, err := s.PausedTopicNames(ctx); return err }},
		{"PausedAmong", "outbox_paused", 5, func() error { _, err := s.PausedAmong(ctx, []string{"t"}); return err }},
		{"AddMinute", "outbox_minutes", 6, func() error { return s.AddMinute(ctx, 1, 0) }},
		{"Minutes", "outbox_minutes", 6, func() error { _, _, err := s.Minutes(ctx, time.Hour); return err }},
	}
	for _, c := range calls {
		err := c.call()
		if !errors.Is(err, outboxdriver.ErrNotMigrated) {
			t.Errorf("%s on a table at migration %d: %v; want an error wrapping ErrNotMigrated", c.name, beforeSideTables, err)
			continue
		}
		for _, want := range []string{c.table, "migration " + string(rune('0'+c.migration)), "outbox migrate up"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q; want it to name %q", c.name, err, want)
			}
		}
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	if err := s.AddMinute(ctx, 1, 0); err != nil {
		t.Fatalf("AddMinute after migrate up: %v", err)
	}
}
