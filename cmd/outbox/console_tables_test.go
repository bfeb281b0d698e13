package main

import (
	"context"
	"database/sql"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// twoTables are two migrated outbox tables of one database: outbox, with
// a pending message, and billing_outbox, with a dead one.
type twoTables struct {
	db              []string // --database-url and --schema
	outbox, billing processDB
	// names are the tables as the console names them, schema first.
	outboxName, billingName string
}

func postgresTwoTables(t *testing.T) twoTables {
	t.Helper()
	pool, schema, url := pgtest.Pool(t), pgtest.Schema(t), pgtest.URL(t)
	tt := twoTables{db: []string{"--database-url", url, "--schema", schema}, outboxName: schema + ".outbox", billingName: schema + ".billing_outbox"}
	table := func(name string) processDB {
		mustCLI(t, append([]string{"migrate", "up", "--table", name}, tt.db...)...)
		store, err := outboxpg.New(pool, outboxpg.Options{Schema: schema, Table: name})
		if err != nil {
			t.Fatal(err)
		}
		w := must(outbox.NewWriter(store, outbox.WriterConfig{}))
		return processDB{store: store, stats: store.Stats, write: func(ctx context.Context, msgs []*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx pgx.Tx) error { return w.Write(ctx, tx, msgs...) })
		}}
	}
	tt.outbox, tt.billing = table("outbox"), table("billing_outbox")
	return tt
}

func sqliteTwoTables(t *testing.T) twoTables {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	tt := twoTables{db: []string{"--database-url", "sqlite://" + path}, outboxName: "main.outbox", billingName: "main.billing_outbox"}
	table := func(name string) processDB {
		mustCLI(t, append([]string{"migrate", "up", "--table", name}, tt.db...)...)
		store, err := outboxsqlite.Open(t.Context(), path, outboxsqlite.Options{Table: name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = store.Close() })
		w := must(outbox.NewWriter(store, outbox.WriterConfig{}))
		return processDB{store: store, stats: store.Stats, write: func(ctx context.Context, msgs []*outbox.Message) error {
			return w.Transact(ctx, func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, msgs...) })
		}}
	}
	tt.outbox, tt.billing = table("outbox"), table("billing_outbox")
	return tt
}

func TestConsoleServesEveryOutboxTableOfTheSchemaUnderItsOwnPathWithAnIndex(t *testing.T) {
	t.Parallel()
	tt := postgresTwoTables(t)
	testSeveralTables(t, tt, "--all-tables")
}

func TestSQLiteConsoleServesSeveralTablesOfOneFileUnderTheirOwnPathsWithAnIndex(t *testing.T) {
	t.Parallel()
	tt := sqliteTwoTables(t)
	testSeveralTables(t, tt, "--table", "outbox", "--table", "billing_outbox")
}

// links are the addresses a page's links and forms go to.
var links = regexp.MustCompile(`(?:href|action|formaction)="([^"]*)"`)

// testSeveralTables starts the console on both tables with tables (the
// flags that name them): the index at / shows each table's figures and
// warnings and links to it, each table's pages are under /t/NAME/ and link
// only there (or to the index), a retry there acts on that table alone,
// is sent back there and is audited with the table's name, and --read-only
// refuses it.
func testSeveralTables(t *testing.T, tt twoTables, tables ...string) {
	ctx := t.Context()
	if err := tt.outbox.write(ctx, []*outbox.Message{{Topic: "orders", Payload: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	dead := &outbox.Message{Topic: "invoices", Payload: []byte("{}")}
	deadLetterAll(t, tt.billing, []*outbox.Message{dead}, func(int, *outbox.Message) string { return "endpoint answered 422" })

	base, log := startConsole(t, append(tables, tt.db...)...)
	index := get(t, base+"/")
	row := func(name string) string {
		return regexp.MustCompile(`(?s)<tr id="t-` + regexp.QuoteMeta(name) + `">.*?</tr>`).FindString(index)
	}
	outboxRow, billingRow := row(tt.outboxName), row(tt.billingName)
	if !strings.Contains(outboxRow, `href="/t/`+tt.outboxName+`/"`) || !strings.Contains(outboxRow, `<td class="pending">1</td>`) || !strings.Contains(outboxRow, `<td class="dead">0</td>`) {
		t.Errorf("the index's row of %s is %q; want a link to /t/%s/, 1 pending and 0 dead", tt.outboxName, outboxRow, tt.outboxName)
	}
	if !strings.Contains(billingRow, `<td class="dead">1</td>`) || !strings.Contains(billingRow, "banner-dead") {
		t.Errorf("the index's row of %s is %q; want 1 dead and its warning", tt.billingName, billingRow)
	}

	billing := base + "/t/" + tt.billingName
	// A paused topic puts a notice on the overview and a Resume form on
	// the Paused page, whose links are checked too.
	if _, err := tt.billing.store.(outboxdriver.TopicPauser).PauseTopic(ctx, "invoices", "test", ""); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/dead", "/dead/" + dead.ID.String(), "/replay", "/paused", "/inbox"} {
		page := get(t, billing+path)
		for _, m := range links.FindAllStringSubmatch(page, -1) {
			if m[1] != "/" && !strings.HasPrefix(m[1], "/t/"+tt.billingName+"/") {
				t.Errorf("the page %s links to %q, outside its table's path /t/%s/", path, m[1], tt.billingName)
			}
		}
	}
	if page := get(t, base+"/t/"+tt.outboxName+"/dead"); !strings.Contains(page, "0 matching dead message(s)") {
		t.Errorf("the dead letters of %s: %q; want none (the dead message is billing's)", tt.outboxName, page)
	}
	page := get(t, billing+"/dead")
	token := csrfOf.FindStringSubmatch(page)
	if token == nil || !strings.Contains(page, dead.ID.String()) {
		t.Fatalf("billing's dead letters %q; want the dead message and a form token", page)
	}
	code, _ := fetch(t, http.MethodPost, billing+"/dead/"+dead.ID.String()+"/retry", url.Values{"csrf": {"0" + token[1]}})
	if code != http.StatusForbidden {
		t.Errorf("a retry with a wrong token: %d; want 403", code)
	}
	req, err := http.NewRequest(http.MethodPost, billing+"/dead/"+dead.ID.String()+"/retry", strings.NewReader(url.Values{"csrf": {token[1]}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if where := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(where, "/t/"+tt.billingName+"/dead?") {
		t.Fatalf("retry: %d to %q; want 303 back to billing's dead letters", resp.StatusCode, where)
	}
	if m, err := tt.billing.store.Get(ctx, dead.ID); err != nil || m.Status != outbox.StatusPending {
		t.Fatalf("the retried message is %v, %v; want pending", m.Status, err)
	}
	audit := regexp.MustCompile(`outbox console: audit.*action=retry .*`).FindAllString(log.String(), -1)
	if len(audit) != 2 || !strings.Contains(audit[1], "table="+tt.billingName) || !strings.Contains(audit[1], "outcome=done") || !strings.Contains(audit[0], "outcome=refused") {
		t.Errorf("audit lines %q; want the refused and the done retry, naming table %s", audit, tt.billingName)
	}

	readOnly, _ := startConsole(t, append(append(tables, "--read-only"), tt.db...)...)
	page = get(t, readOnly+"/t/"+tt.outboxName+"/")
	token = csrfOf.FindStringSubmatch(get(t, readOnly+"/t/"+tt.outboxName+"/replay?count=1&all=1"))
	if token != nil || !strings.Contains(page, `id="read-only"`) {
		t.Errorf("a read-only console's pages: form token %v, read-only mark %v; want no form and the mark", token, strings.Contains(page, `id="read-only"`))
	}
	if code, _ := fetch(t, http.MethodPost, readOnly+"/t/"+tt.billingName+"/dead/"+dead.ID.String()+"/discard", url.Values{}); code != http.StatusForbidden {
		t.Errorf("a discard on a read-only console: %d; want 403", code)
	}
	if _, err := tt.billing.store.Get(ctx, dead.ID); err != nil {
		t.Errorf("after a refused discard the message is gone: %v", err)
	}
}

// The console with --tables serves the outbox table of every schema the
// pattern matches, with the index at /, and not the others.
func TestConsoleServesTheTablesAPatternMatches(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	prefix := pgtest.Schema(t)
	migrateTenants(t, url, prefix, map[string]int{"a": 2, "b": 1})
	other := pgtest.Schema(t) // migrated, and not matched
	mustCLI(t, "migrate", "up", "--database-url", url, "--schema", other)

	base, _ := startConsole(t, "--database-url", url, "--tables", prefix+"_*.outbox")
	index := get(t, base+"/")
	for table, pending := range map[string]string{prefix + "_a.outbox": "2", prefix + "_b.outbox": "1"} {
		row := regexp.MustCompile(`(?s)<tr id="t-` + regexp.QuoteMeta(table) + `">.*?</tr>`).FindString(index)
		if !strings.Contains(row, `href="/t/`+table+`/"`) || !strings.Contains(row, `<td class="pending">`+pending+`</td>`) {
			t.Errorf("the index's row of %s is %q; want a link to /t/%s/ and %s pending", table, row, table, pending)
		}
	}
	if strings.Contains(index, other) {
		t.Errorf("the index shows %s, which the pattern does not match", other)
	}
	for _, tc := range []struct{ flags, want string }{
		{"--all-tables", "give one of --table, --all-tables and --tables"},
		{"--schema=" + other, "leave out --schema and --table"},
	} {
		code, _, stderr := cli(t, "console", "--database-url", url, "--tables", prefix+"_*.outbox", tc.flags)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("console --tables %s: exit %d, stderr %q; want exit 2 saying %q", tc.flags, code, stderr, tc.want)
		}
	}
}
