package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
)

func TestStatusListsALiveRelayThenFlagsPendingMessagesOnceItIsKilled(t *testing.T) {
	t.Parallel()
	testStatusListsLiveRelays(t, postgresDB(t))
}

func TestSQLiteStatusListsALiveRelayThenFlagsPendingMessagesOnceItIsKilled(t *testing.T) {
	t.Parallel()
	testStatusListsLiveRelays(t, sqliteProcessDB(t))
}

// testStatusListsLiveRelays runs a relay process with a short heartbeat and
// reads `outbox status` while it runs and after a SIGKILL, which leaves its
// row to go stale: the relay is shown live, then GONE, and pending messages
// with no live relay are flagged.
func testStatusListsLiveRelays(t *testing.T, db processDB) {
	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	type status struct {
		Pending int64 `json:"pending"`
		Relays  struct {
			Live   int `json:"live"`
			Relays []struct {
				PID     int    `json:"pid"`
				Host    string `json:"host"`
				Live    bool   `json:"live"`
				Version string `json:"version"`
				Config  string `json:"config"`
			} `json:"relays"`
		} `json:"relays"`
		Warnings []string `json:"warnings"`
	}
	statusArgs := append([]string{"status", "--json", "--database-url", db.url}, db.args...)
	read := func() status {
		t.Helper()
		var st status
		out := mustCLI(t, statusArgs...)
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json printed %q: %v", out, err)
		}
		return st
	}
	out, err := os.CreateTemp(t.TempDir(), "published")
	if err != nil {
		t.Fatal(err)
	}
	relay := startRelayProcess(t, bin, db, out, "--heartbeat-interval", "100ms", "--workers", "3")
	var st status
	waitUntil(t, 20*time.Second, "status to list the relay process as live", func() bool {
		st = read()
		return st.Relays.Live == 1
	})
	r := st.Relays.Relays[0]
	host, _ := os.Hostname()
	if r.PID != relay.Process.Pid || r.Host != host || !strings.Contains(r.Config, `"workers":3`) || len(st.Warnings) != 0 {
		t.Fatalf("status lists %+v, warnings %q; want pid %d on %s with workers 3 in its config, no warning", r, st.Warnings, relay.Process.Pid, host)
	}

	if err := relay.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = relay.Wait()
	if err := db.write(t.Context(), []*outbox.Message{{Topic: "t", Payload: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "status to show the killed relay gone and flag the pending message", func() bool {
		st = read()
		return st.Relays.Live == 0 && len(st.Relays.Relays) == 1
	})
	if st.Pending != 1 || len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], "no live relay") {
		t.Fatalf("after the kill: pending %d, warnings %q; want 1 pending and a warning of no live relay", st.Pending, st.Warnings)
	}
	text := mustCLI(t, append([]string{"status", "--database-url", db.url}, db.args...)...)
	for _, want := range []string{"relays          0 live, 1 gone", "GONE", "WARNING: 1 message(s) pending and no live relay (the last one was seen"} {
		if !strings.Contains(text, want) {
			t.Fatalf("status printed:\n%s\nwant it to contain %q", text, want)
		}
	}
}

func TestStatusListsStuckKeysAndWarnsOfNoProgress(t *testing.T) {
	t.Parallel()
	testStatusListsStuckKeys(t, postgresDB(t))
}

func TestSQLiteStatusListsStuckKeysAndWarnsOfNoProgress(t *testing.T) {
	t.Parallel()
	testStatusListsStuckKeys(t, sqliteProcessDB(t))
}

// testStatusListsStuckKeys writes a keyed message no relay takes and reads
// `outbox status` with a threshold it has passed: the key is stuck, not tried
// yet, and the table makes no progress.
func testStatusListsStuckKeys(t *testing.T, db processDB) {
	m := &outbox.Message{Topic: "orders", Key: "order-7", Payload: []byte("x")}
	if err := db.write(t.Context(), []*outbox.Message{m}); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"status", "--database-url", db.url, "--stuck-after", "50ms"}, db.args...)
	var st struct {
		StuckKeys struct {
			Total int `json:"total"`
			Keys  []struct {
				Key  string `json:"key"`
				Head string `json:"head"`
			} `json:"keys"`
		} `json:"stuck_keys"`
		Warnings []string `json:"warnings"`
	}
	waitUntil(t, 20*time.Second, "the key to be stuck past 50ms", func() bool {
		out := mustCLI(t, append(args, "--json")...)
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json printed %q: %v", out, err)
		}
		return st.StuckKeys.Total == 1
	})
	if len(st.StuckKeys.Keys) != 1 || st.StuckKeys.Keys[0].Key != "order-7" || st.StuckKeys.Keys[0].Head != m.ID.String() {
		t.Fatalf("stuck keys %+v; want order-7 with head %s", st.StuckKeys, m.ID)
	}
	text := mustCLI(t, args...)
	for _, want := range []string{"stuck keys      1 (heads waiting over 50ms", `"order-7" head ` + m.ID.String(), "not tried yet", "WARNING: no progress: 1 message(s) pending", "no relay has published"} {
		if !strings.Contains(text, want) {
			t.Fatalf("status printed:\n%s\nwant it to contain %q", text, want)
		}
	}
	if code, _, errOut := cli(t, append(args, "--stuck-keys", "-1")...); code != 2 || !strings.Contains(errOut, "--stuck-keys -1") {
		t.Fatalf("status --stuck-keys -1: exit %d, %q; want a usage error naming the flag", code, errOut)
	}
}

func TestStatusDoesNotCallAScheduledMessageNoProgress(t *testing.T) {
	t.Parallel()
	db := sqliteProcessDB(t)
	later := &outbox.Message{Topic: "reminders", Key: "r-1", Payload: []byte("x"), AvailableAt: time.Now().Add(time.Hour)}
	if err := db.write(t.Context(), []*outbox.Message{later}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the scheduled message to be older than 50ms", func() bool {
		st, err := db.stats(t.Context())
		return err == nil && st.OldestPending > 100*time.Millisecond
	})
	out := mustCLI(t, "status", "--database-url", db.url, "--stuck-after", "50ms")
	if strings.Contains(out, "no progress") || !strings.Contains(out, "stuck keys      0") {
		t.Fatalf("status of a table holding only a message due in an hour printed:\n%s\nwant no stuck key and no no-progress warning", out)
	}
}
