package main

import (
	"maps"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/relaytest"
)

func TestConsoleOverviewBannersAppearExactlyWhenTheirConditionHolds(t *testing.T) {
	t.Parallel()
	testConsoleOverviewBanners(t, postgresDB(t))
}

func TestSQLiteConsoleOverviewBannersAppearExactlyWhenTheirConditionHolds(t *testing.T) {
	t.Parallel()
	testConsoleOverviewBanners(t, sqliteProcessDB(t))
}

// bannerRE finds the overview's warnings: each a div with id banner-KIND.
var bannerRE = regexp.MustCompile(`id="banner-([a-z-]+)">([^<]*)<`)

// banners returns the warnings of the overview at url, by kind.
func banners(t *testing.T, url string) (map[string]string, string) {
	t.Helper()
	page := get(t, url)
	found := map[string]string{}
	for _, m := range bannerRE.FindAllStringSubmatch(page, -1) {
		found[m[1]] = m[2]
	}
	return found, page
}

// testConsoleOverviewBanners walks a table through the conditions the
// overview warns of, one after the other, and reads the overview of two
// consoles at each step: one with --stuck-after 1h (nothing waited that
// long) and one with 50ms. Each banner shows when its condition holds and
// only then.
func testConsoleOverviewBanners(t *testing.T, db processDB) {
	ctx := t.Context()
	reg, ok := db.store.(outboxdriver.RelayRegistry)
	if !ok {
		t.Fatalf("store %T keeps no relay registry", db.store)
	}
	serve := func(stuckAfter time.Duration) string {
		c, err := newConsole(db.store, nil, "the.table", relaytest.TestLogger(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		c.stuckAfter = stuckAfter
		srv := httptest.NewServer(c.handler())
		t.Cleanup(srv.Close)
		return srv.URL + "/"
	}
	patient, eager := serve(time.Hour), serve(50*time.Millisecond)
	want := func(url string, kinds ...string) (map[string]string, string) {
		t.Helper()
		got, page := banners(t, url)
		if keys := slices.Sorted(maps.Keys(got)); !slices.Equal(keys, kinds) {
			t.Fatalf("overview %s shows banners %v; want exactly %v:\n%s", url, got, kinds, page)
		}
		return got, page
	}

	beat := outboxdriver.RelayBeat{ID: uuid.New(), Host: "relay-host-1", PID: 4242, Version: "v1.2.3", Config: "{}",
		Interval: time.Hour, SinceClaim: -1, SincePublish: -1, Forget: 24 * time.Hour}
	if err := reg.BeatRelay(ctx, beat); err != nil {
		t.Fatal(err)
	}
	_, page := want(eager)
	relayRow := regexp.MustCompile(`(?s)<tr id="relay-` + beat.ID.String() + `">.*?</tr>`)
	if row := relayRow.FindString(page); !strings.Contains(row, "relay-host-1") || !strings.Contains(row, "4242") ||
		!strings.Contains(row, "v1.2.3") || !strings.Contains(row, ">live<") {
		t.Fatalf("overview of an empty table with a live relay: relay row %q; want host, pid, version and live:\n%s", row, page)
	}

	// A dead message: the dead banner, with its count.
	dead := &outbox.Message{Topic: "orders", Key: "d-1", Payload: []byte("{}")}
	if err := db.write(ctx, []*outbox.Message{dead}); err != nil {
		t.Fatal(err)
	}
	token := uuid.New()
	if got, err := db.store.SettleAndClaim(ctx, outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %d, %v; want 1", len(got), err)
	}
	if _, err := db.store.SettleAndClaim(ctx, outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: dead.ID, Error: "refused"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := want(patient, "dead"); !strings.Contains(got["dead"], "1 dead message") {
		t.Fatalf("dead banner %q; want it to count 1 dead message", got["dead"])
	}

	// A pending message of a key that nobody publishes: stuck, and no
	// progress, once it waited past --stuck-after; not before.
	pending := &outbox.Message{Topic: "orders", Key: "o-1", Payload: []byte("{}")}
	if err := db.write(ctx, []*outbox.Message{pending}); err != nil {
		t.Fatal(err)
	}
	want(patient, "dead")
	waitUntil(t, 20*time.Second, "the key to be stuck past 50ms", func() bool {
		got, _ := banners(t, eager)
		return got["stuck"] != ""
	})
	got, page := want(eager, "dead", "no-progress", "stuck")
	if !strings.Contains(got["stuck"], "1 key") || !strings.Contains(got["no-progress"], "no progress") {
		t.Fatalf("banners %v; want 1 stuck key and no progress", got)
	}
	stuckRow := regexp.MustCompile(`(?s)<tr id="stuck-o-1">.*?</tr>`).FindString(page)
	if !strings.Contains(stuckRow, pending.ID.String()) || !strings.Contains(stuckRow, "not tried yet") {
		t.Fatalf("stuck key row %q; want the head %s and why it waits:\n%s", stuckRow, pending.ID, page)
	}

	// The relay stops beating: once it missed three beats it is gone, and
	// pending messages with no live relay are flagged.
	beat.Interval = 10 * time.Millisecond
	if err := reg.BeatRelay(ctx, beat); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "the relay to be gone", func() bool {
		got, _ := banners(t, patient)
		return got["no-relay"] != ""
	})
	got, page = want(patient, "dead", "no-relay")
	if !strings.Contains(got["no-relay"], "no live relay") {
		t.Fatalf("no-relay banner %q; want it to say so", got["no-relay"])
	}
	if row := relayRow.FindString(page); !strings.Contains(row, ">GONE<") {
		t.Fatalf("relay row %q after it stopped beating; want it marked GONE", row)
	}
}

func TestConsoleRefusesANonPositiveStuckAfterNamingTheFlag(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"0", "-1m"} {
		code, _, errOut := cli(t, "console", "--stuck-after", value, "--database-url", "sqlite://"+t.TempDir()+"/never-opened.db")
		if code != 2 || !strings.Contains(errOut, "--stuck-after ") || !strings.Contains(errOut, "positive duration") {
			t.Errorf("console --stuck-after %s: exit %d, %q; want a usage error naming the flag and the fix", value, code, errOut)
		}
	}
}
