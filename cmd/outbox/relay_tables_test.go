package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/pgtest"
)

// `outbox relay --tables 'PREFIX_*.outbox'` publishes the messages of every
// schema the pattern matches, finds a schema migrated while it runs at its
// next rescan, and leaves alone a schema the pattern does not match.
func TestRelayTablesServesEverySchemaThePatternMatches(t *testing.T) {
	t.Parallel()
	testRelayTables(t)
}

// The same with --transaction-leases: the tables' stores share the pool's
// places for open claims.
func TestRelayTablesWithTransactionLeasesServesEverySchemaThePatternMatches(t *testing.T) {
	t.Parallel()
	testRelayTables(t, "--transaction-leases")
}

func testRelayTables(t *testing.T, flags ...string) {
	url := pgtest.URL(t)
	prefix := pgtest.Schema(t) // a fresh name: the tenants' schemas start with it
	tenant := func(name string) []string {
		t.Helper()
		schema := prefix + "_" + name
		t.Cleanup(func() { dropSchema(t, schema) })
		db := []string{"--database-url", url, "--schema", schema}
		mustCLI(t, append([]string{"migrate", "up"}, db...)...)
		return db
	}
	send := func(db []string) string {
		t.Helper()
		return strings.TrimSpace(mustCLI(t, append([]string{"send", "--topic", "orders", "--payload", "{}"}, db...)...))
	}
	a, b := tenant("a"), tenant("b")
	other := []string{"--database-url", url, "--schema", pgtest.Schema(t)}
	mustCLI(t, append([]string{"migrate", "up"}, other...)...)
	ids := []string{send(a), send(b)}
	unmatched := send(other)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut clitest.LockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"relay", "--database-url", url, "--tables", prefix + "_*.outbox",
			"--poll-interval", "50ms", "--rescan-interval", "100ms"}, flags...), &out, &errOut)
	}()
	waitPublished := func(what string, ids ...string) {
		t.Helper()
		waitUntil(t, 20*time.Second, what, func() bool {
			for _, id := range ids {
				if !strings.Contains(out.String(), id) {
					return false
				}
			}
			return true
		})
	}
	waitPublished("the messages of the two matching schemas", ids...)
	c := tenant("c")
	added := send(c)
	waitPublished("the message of a schema migrated while the relay runs", added)
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay --tables exited %d; stderr:\n%s", code, errOut.String())
	}
	if strings.Contains(out.String(), unmatched) {
		t.Fatalf("message %s of a schema the pattern does not match was published", unmatched)
	}
	for _, id := range append(ids, added) {
		if n := strings.Count(out.String(), id); n != 1 {
			t.Errorf("message %s published %d times, want once", id, n)
		}
	}
}

// `outbox relay --tables --metrics-addr` serves each table's gauges and
// its relay's outbox_relay_ready while the table is served, and drops them
// once the table is gone; /readyz has one check, the tables relay's, which
// passes while it lists its tables, and no line per table.
func TestRelayTablesServesEachTablesMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	prefix := pgtest.Schema(t)
	migrateTenants(t, url, prefix, map[string]int{"a": 1, "b": 1})
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut clitest.LockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"relay", "--database-url", url, "--tables", prefix + "_*.outbox", "--metrics-addr", addr,
			"--poll-interval", "50ms", "--rescan-interval", "100ms"}, &out, &errOut)
	}()
	// What a scrape shows of a table: its pending gauge and its relay's
	// ready gauge at 1.
	shows := func(table string) (gauge, ready bool) {
		_, metrics := httpGet(addr, "/metrics")
		return hasSeries(metrics, "outbox_pending_messages", table, ""), hasSeries(metrics, "outbox_relay_ready", table, " 1")
	}
	readyz := func() (int, string) { return httpGet(addr, "/readyz") }
	a, b := prefix+"_a.outbox", prefix+"_b.outbox"
	waitUntil(t, 20*time.Second, "both tables' gauges and ready relays, and /readyz 200", func() bool {
		ga, ra := shows(a)
		gb, rb := shows(b)
		code, _ := readyz()
		return ga && ra && gb && rb && code == 200
	})
	if _, body := readyz(); !strings.Contains(body, "tables relay") || strings.Contains(body, a) || strings.Contains(body, b) {
		t.Errorf("/readyz: %q; want the tables relay's check and no line per table", body)
	}
	dropSchema(t, prefix+"_b")
	waitUntil(t, 20*time.Second, "the gone table's gauges to go", func() bool {
		gb, _ := shows(b)
		_, metrics := httpGet(addr, "/metrics")
		return !gb && !hasSeries(metrics, "outbox_relay_ready", b, "")
	})
	if ga, ra := shows(a); !ga || !ra {
		t.Errorf("after the other table went, table %s shows gauge %v, ready gauge %v; want both", a, ga, ra)
	}
	if code, body := readyz(); code != 200 {
		t.Errorf("/readyz after a table went: %d %q; want 200", code, body)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay --tables --metrics-addr exited %d; stderr:\n%s", code, errOut.String())
	}
}

// `outbox status --tables` shows a line per matching table with its
// counts, the totals, and a warning for each table whose messages wait
// with no live relay; --json has the same per table.
func TestStatusTablesShowsALinePerMatchingTable(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	prefix := pgtest.Schema(t)
	migrateTenants(t, url, prefix, map[string]int{"a": 2, "b": 1, "c": 0})
	// Tenant c's table is at an older migration, which a relay refuses.
	if _, err := pgtest.Pool(t).Exec(t.Context(), `ALTER TABLE "`+prefix+`_c".outbox DROP COLUMN seq CASCADE`); err != nil {
		t.Fatal(err)
	}
	pattern := prefix + "_*.outbox"
	out := mustCLI(t, "status", "--database-url", url, "--tables", pattern)
	if !strings.Contains(out, "WARNING: "+prefix+"_c.outbox: cannot read it: a relay refuses it") || !strings.Contains(out, "outbox migrate up --schema "+prefix+"_c") {
		t.Errorf("status --tables: no warning that a relay refuses %s_c.outbox, naming the fix; output:\n%s", prefix, out)
	}
	row := regexp.MustCompile(`(?m)^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\S+\s+(\d+)\s*$`)
	pending := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(out, -1) {
		pending[m[1]] = m[2]
	}
	want := map[string]string{prefix + "_a.outbox": "2", prefix + "_b.outbox": "1", "total": "3"}
	if !maps.Equal(pending, want) {
		t.Fatalf("status --tables: pending by table %v, want %v; output:\n%s", pending, want, out)
	}
	if code, _, stderr := cli(t, "status", "--database-url", url, "--tables", pattern, "--stuck-keys", "3"); code != 2 || !strings.Contains(stderr, "not with --tables") {
		t.Errorf("status --tables --stuck-keys: exit %d, stderr %q; want exit 2", code, stderr)
	}
	if out := mustCLI(t, "status", "--database-url", url, "--tables", prefix+"_none*.outbox"); !strings.Contains(out, "WARNING: no schema matching") {
		t.Errorf("status --tables matching nothing printed %q; want a warning", out)
	}
	for _, table := range []string{prefix + "_a.outbox", prefix + "_b.outbox"} {
		if !strings.Contains(out, "WARNING: "+table+": ") || !strings.Contains(out, "no live relay") {
			t.Errorf("status --tables: no warning that %s has messages and no live relay; output:\n%s", table, out)
		}
	}
	var doc struct {
		Pattern string
		Tables  []struct {
			Table   string
			Pending int
			Error   string
		}
	}
	if err := json.Unmarshal([]byte(mustCLI(t, "status", "--database-url", url, "--tables", pattern, "--json")), &doc); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, table := range doc.Tables {
		if table.Error != "" {
			got[table.Table] = "error"
			continue
		}
		got[table.Table] = fmt.Sprint(table.Pending)
	}
	want[prefix+"_c.outbox"] = "error"
	delete(want, "total")
	if doc.Pattern != pattern || !maps.Equal(got, want) {
		t.Fatalf("status --tables --json: pattern %q, pending by table %v; want %q, %v", doc.Pattern, got, pattern, want)
	}
}

// migrateTenants migrates the outbox table of schema PREFIX_NAME for each
// name of messages, and sends it that many messages; the schemas are
// dropped when the test ends.
func migrateTenants(t *testing.T, url, prefix string, messages map[string]int) {
	t.Helper()
	for name, n := range messages {
		schema := prefix + "_" + name
		t.Cleanup(func() { dropSchema(t, schema) })
		db := []string{"--database-url", url, "--schema", schema}
		mustCLI(t, append([]string{"migrate", "up"}, db...)...)
		for range n {
			mustCLI(t, append([]string{"send", "--topic", "orders", "--payload", "{}"}, db...)...)
		}
	}
}

// hasSeries reports whether a Prometheus scrape has a sample of metric for
// table whose line ends with suffix (" 1": its value is 1).
func hasSeries(scrape, metric, table, suffix string) bool {
	for line := range strings.Lines(scrape) {
		line = strings.TrimRight(line, "\n")
		if strings.HasPrefix(line, metric+"{") && strings.Contains(line, `table="`+table+`"`) && strings.HasSuffix(line, suffix) {
			return true
		}
	}
	return false
}

// Each flag that --tables cannot work with is refused with exit code 2 and
// the reason, before anything runs.
func TestRelayTablesRefusesTheFlagsItCannotWorkWith(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--database-url", url, "--tables", "t_*.outbox", "--schema", "s"}, "leave out --schema"},
		{[]string{"--database-url", "sqlite:" + t.TempDir() + "/app.db", "--tables", "t_*"}, "needs a PostgreSQL database URL"},
		{[]string{"--database-url", url, "--tables", ".outbox"}, "use SCHEMA.TABLE"},
		{[]string{"--database-url", url, "--tables", "t_*.out*"}, "use SCHEMA.TABLE"},
		{[]string{"--database-url", url, "--tables", "t_*", "--watch-wal"}, "--watch-wal"},
		{[]string{"--database-url", url, "--tables", "t_*", "--rescan-interval", "0s"}, "--rescan-interval"},
		{[]string{"--database-url", url, "--rescan-interval", "1m"}, "give it with --tables"},
		{[]string{"--database-url", url, "--tables", "Tenant_*"}, "lower-case letters"},
		{[]string{"--database-url", url, "--tables", "tenant-*"}, "lower-case letters"},
		{[]string{"--database-url", url, "--tables", "t_*.a.b"}, "the table after the dot"},
		{[]string{"--database-url", url, "--tables", "t_*.Outbox"}, "the table after the dot"},
	} {
		code, _, stderr := cli(t, append([]string{"relay"}, tc.args...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("relay %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(tc.args, " "), code, stderr, tc.want)
		}
	}
}

// dropSchema drops schema and everything in it.
func dropSchema(t *testing.T, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pgtest.Pool(t).Exec(ctx, `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}
