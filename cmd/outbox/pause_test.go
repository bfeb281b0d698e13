package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

func TestPauseHoldsATopicUntilResume(t *testing.T) {
	t.Parallel()
	testPause(t, postgresDB(t))
}

func TestSQLitePauseHoldsATopicUntilResume(t *testing.T) {
	t.Parallel()
	testPause(t, sqliteProcessDB(t))
}

// testPause pauses a topic with the CLI, checks what `paused` and `status`
// say and that no claim takes its messages, and resumes it.
func testPause(t *testing.T, db processDB) {
	ctx := t.Context()
	msgs := []*outbox.Message{{Topic: "mail", Payload: []byte("1")}, {Topic: "mail", Payload: []byte("2")}, {Topic: "orders", Payload: []byte("3")}}
	if err := db.write(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	with := func(args ...string) []string { return append(append(args, "--database-url", db.url), db.args...) }

	if code, _, errOut := cli(t, with("pause")...); code != 2 || !strings.Contains(errOut, "--topic") {
		t.Fatalf("pause without --topic: exit %d, %q; want a usage error naming --topic", code, errOut)
	}
	if out := mustCLI(t, with("paused")...); !strings.Contains(out, "no topic is paused") {
		t.Fatalf("paused before any pause printed %q", out)
	}
	if out := mustCLI(t, with("pause", "--topic", "mail", "--reason", "gateway down")...); !strings.Contains(out, `topic "mail" paused: 2 pending message(s) held`) {
		t.Fatalf("pause printed %q; want the topic and its 2 messages", out)
	}
	if out := mustCLI(t, with("paused")...); !strings.Contains(out, "mail: paused") || !strings.Contains(out, `"gateway down"`) || !strings.Contains(out, "2 message(s) waiting") {
		t.Fatalf("paused printed %q; want mail with the reason and 2 messages", out)
	}
	if out := mustCLI(t, with("status")...); !strings.Contains(out, "paused topics   1") || !strings.Contains(out, "mail: paused") {
		t.Fatalf("status printed %q; want the paused topic listed", out)
	}
	got, err := db.store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	if err != nil || len(got) != 1 || got[0].Topic != "orders" {
		t.Fatalf("a claim while mail is paused returned %v, %v; want only the orders message", got, err)
	}
	if out := mustCLI(t, with("resume", "--topic", "mail")...); !strings.Contains(out, `topic "mail" resumed: 2 message(s) due again`) {
		t.Fatalf("resume printed %q; want its 2 messages due again", out)
	}
	if out := mustCLI(t, with("paused")...); !strings.Contains(out, "no topic is paused") {
		t.Fatalf("paused after the resume printed %q", out)
	}
	got, err = db.store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: uuid.New()})
	if err != nil || len(got) != 2 || got[0].Topic != "mail" || got[1].Topic != "mail" {
		t.Fatalf("a claim after the resume returned %v, %v; want the 2 mail messages", got, err)
	}
}

func TestRelayRefusesABadRateLimit(t *testing.T) {
	t.Parallel()
	db := sqliteProcessDB(t)
	if code, _, errOut := cli(t, append([]string{"relay", "--rate-limit", "mail=5", "--rate-limit", "mail=6", "--database-url", db.url}, db.args...)...); code != 2 || !strings.Contains(errOut, `topic "mail" is limited twice`) {
		t.Errorf("relay with a topic limited twice: exit %d, %q; want a usage error naming the topic", code, errOut)
	}
	for _, v := range []string{"mail", "mail=0", "mail=-1", "=5", "mail=fast"} {
		code, _, errOut := cli(t, append([]string{"relay", "--rate-limit", v, "--database-url", db.url}, db.args...)...)
		if code != 2 || !strings.Contains(errOut, "--rate-limit") || !strings.Contains(errOut, v) {
			t.Errorf("relay --rate-limit %q: exit %d, %q; want a usage error naming the flag and value", v, code, errOut)
		}
	}
}
