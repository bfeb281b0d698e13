package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

// consoleFS holds the templates, one file per group of pages.
//
//go:embed console*.html
var consoleFS embed.FS

// consoleTemplates are the console's pages: plain HTML forms, no script and
// nothing loaded from elsewhere, so the console works without internet
// access.
var consoleTemplates = template.Must(template.New("console").Funcs(template.FuncMap{
	"short": func(s string) string { return oneLine(s, 140) },
}).ParseFS(consoleFS, "console*.html"))

const (
	// consoleScanLimit bounds how many dead messages one filter reads.
	consoleScanLimit = 10000
	// consoleRows is how many matching dead messages a page lists.
	consoleRows = 200
	// consoleBatch is how many ids one retry or discard call takes.
	consoleBatch = 1000
	// consoleStuckAfter is the default of --stuck-after, as for `outbox
	// status`.
	consoleStuckAfter = 5 * time.Minute
	// consoleStuckKeys is how many stuck keys the overview lists.
	consoleStuckKeys = 10
)

func newConsoleCommand(g *globalFlags) *cobra.Command {
	var (
		addr           string
		allowHosts     []string
		authValues     []string
		allTables      bool
		tablesPattern  string
		claimCheckURL  string
		inboxTableName string
		readOnly       bool
		tables         []string
		stuckAfter     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve a web page to watch the table and handle dead letters",
		Long: `console serves a web page on --addr. Its overview is what on-call opens first: a warning at
the top for each thing wrong (messages pending and no live relay; no progress; keys stuck past
--stuck-after; dead messages), the table's counts (pending, in flight, dead, oldest pending age),
the relays (live, or GONE once they missed three heartbeats) and the stuck keys with what holds
each. Its dead letters are grouped by how they failed (topic, class, error with ids and numbers
masked; the whole error shown), each group retried or discarded whole; they are filtered by
topic, error text or group, shown one by one (headers, payload as JSON or hex, the history of
failed attempts, the whole last error) and retried or discarded, one or every match of a filter;
and, with --inbox-table, the consumers of the inbox table: their records, the duplicates they
skipped, those kept for pending outgoing messages and the messages they parked, which it lists,
shows one by one (payload, headers, error, where each stands in its key), hands back to the
running consumer or discards. Its Replay page publishes again messages already published and kept
by the relays' --retention, as outbox replay does: a form (topic, key, since, until, ids, or every
kept message), a first step that only counts them (a dry run), then a confirmation that makes at
most the counted messages pending again with their ids; over 10,000 it is refused (use outbox
replay --limit N). Its Paused page lists the paused topics (since when, by whom, why, how many
messages wait) with a Resume button each, and the topics resumed with messages still held, and
pauses a topic, as outbox pause, resume and paused do; the overview names the paused topics.

A database with an inbox table and no outbox table (a consumer's) is served too: the Inbox pages
work and the outbox pages say there is no outbox table and how to make one (outbox migrate up,
or --table); with neither table it refuses to start.

--table repeated serves several outbox tables of the database (on PostgreSQL, SCHEMA.TABLE names a
table of another schema than --schema), and --all-tables every outbox table of --schema (or of the
SQLite file), known by the TABLE_migrations table outbox migrate up writes beside it, and --tables
'tenant_*.outbox' the tables of every schema the pattern matches, as outbox relay --tables finds
them (once, at start). Each table's pages are then under /t/SCHEMA.TABLE/ (SQLite:
/t/main.TABLE/), and / is an index of the tables
with their pending, dead and oldest pending figures and their warnings. With one table the pages
are at / as before. Logins, --read-only, the form token and the audit lines cover every table.

It listens on 127.0.0.1 by default, where it asks for no login. To serve it on another address,
give --auth, or it refuses to start:
  --auth basic:FILE    users and passwords, for browsers: FILE holds user:bcrypt-hash lines
                       (htpasswd -B -c FILE alice); a browser asks for them once
  --auth bearer:FILE   one token, for scripts and proxies: FILE holds it (openssl rand -hex 32 > FILE),
                       sent as Authorization: Bearer TOKEN
  --auth none          no login, accepting the risk: only behind a proxy that authenticates
Give --auth twice for both basic and bearer. The files are read at start; a wrong password or
token is answered 401 and logged at WARN with the remote address (once a minute per address).
The console speaks plain HTTP: beyond loopback, reach it through a TLS proxy or an SSH tunnel, or
passwords and tokens cross the network in clear.

--read-only shows everything and changes nothing: retry, discard, replay, pause and resume are
refused (403) and their buttons are not shown. Every change asked, done or refused, is logged at
INFO as one line "outbox console: audit" (audit=true) naming the user (or "bearer", or
"anonymous" without --auth), the remote address, the action, the table, the ids or the filter
and how many, and the outcome.

It answers only requests addressed to an IP address, localhost, the host of --addr or a name
given with --allow-host (say, the name your proxy forwards), so that a site whose name its owner
points at 127.0.0.1 (DNS rebinding) cannot read it. Every change is a POST carrying a token of
the page and sent from the console's own page (Origin, Sec-Fetch-Site), so another site cannot
make a browser retry or discard messages. "Every match" acts only on the matches the page
counted, not on messages that died since; a group's retry or discard is refused if the group
changed since the page was read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Flags first, then the address, then the database: a console
			// that would be open to all is refused before it listens.
			if stuckAfter <= 0 {
				return usagef("--stuck-after %s: use a positive duration, e.g. 5m", stuckAfter)
			}
			auth, err := parseConsoleAuth(authValues)
			if err != nil {
				return err
			}
			tcpAddr, err := net.ResolveTCPAddr("tcp", addr)
			if err != nil {
				return usagef("--addr %s: %v (give HOST:PORT, e.g. 127.0.0.1:8080)", addr, err)
			}
			if err := refuseExposed(tcpAddr, auth); err != nil {
				return usagef("--addr %s: %v", addr, err)
			}
			if warning := exposedWarning(tcpAddr, auth); warning != "" {
				g.logger.Warn("outbox console: "+warning, slog.String("addr", addr))
			}
			ln, err := net.ListenTCP("tcp", tcpAddr)
			if err != nil {
				return fmt.Errorf("--addr %s: %w (pick a free port)", addr, err)
			}
			opened, err := g.openConsoleTables(cmd.Context(), tables, allTables, tablesPattern, inboxTableName)
			if err != nil {
				ln.Close()
				return err
			}
			defer opened.close()
			if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
				allowHosts = append(allowHosts, host)
			}
			c, err := newConsole(nil, opened.inbox, "", g.logger, allowHosts)
			if err != nil {
				ln.Close()
				return err
			}
			c.auth, c.readOnly, c.stuckAfter = auth, readOnly, stuckAfter
			if c.claimCheck, err = openClaimCheck(cmd.Context(), claimCheckURL, false); err != nil {
				ln.Close()
				return err
			}
			set := c.forTables(opened.tables)
			// Beyond loopback, a client that opens connections and sends
			// nothing must not keep them.
			srv := &http.Server{Handler: set.handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
			g.logger.Info("outbox console: serving", slog.String("url", "http://"+ln.Addr().String()+"/"), slog.Any("tables", set.names()),
				slog.String("auth", c.authKinds()), slog.Bool("read_only", readOnly), slog.Bool("discard_deletes_blobs", c.claimCheck != nil))
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address to serve the console on")
	cmd.Flags().StringVar(&inboxTableName, "inbox-table", outboxpg.InboxTableDefault, "the consumers' inbox table beside the outbox table, for the Inbox page (\"\" for none)")
	cmd.Flags().StringArrayVar(&allowHosts, "allow-host", nil, "also answer requests addressed to this host name (repeatable), e.g. the name of your proxy; IP addresses and localhost always work")
	cmd.Flags().StringArrayVar(&authValues, "auth", nil, "ask for credentials: basic:HTPASSWD-FILE (users and bcrypt hashes, htpasswd -B; for browsers), bearer:TOKEN-FILE (one token; for scripts), both (repeat the flag), or none; required unless --addr is a loopback address")
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "show the tables but refuse every retry, discard, replay, pause and resume (403)")
	// It shadows the global --table, which names one table.
	cmd.Flags().StringArrayVar(&tables, "table", nil, "an outbox table to serve (default outbox); repeat it for several, each served under /t/SCHEMA.TABLE/ with an index of them at /; on PostgreSQL SCHEMA.TABLE names a table of another schema than --schema")
	cmd.Flags().BoolVar(&allTables, "all-tables", false, "serve every outbox table of --schema (PostgreSQL) or of the file (SQLite): each table that has its TABLE_migrations table beside it")
	cmd.Flags().StringVar(&tablesPattern, "tables", "", "PostgreSQL: serve every outbox table SCHEMA.TABLE matches, where * in SCHEMA matches any characters (e.g. 'tenant_*.outbox'), as outbox relay --tables finds them, once at start; the Inbox pages show the first matching schema's inbox table")
	cmd.Flags().StringVar(&claimCheckURL, "claim-check", "", claimCheckFlagUsage+"; a discard deletes the messages' blobs too")
	cmd.Flags().DurationVar(&stuckAfter, "stuck-after", consoleStuckAfter, "a key whose head waited longer is stuck, and pending messages this old with nothing published for as long are no progress (as for outbox status)")
	return cmd
}

// console serves the pages of one outbox table.
type console struct {
	admin outboxdriver.Admin // nil when noOutbox says why
	auth  *consoleAuth       // nil: anyone who reaches it (loopback, or --auth none)
	// base is the path of its pages: "" alone, /t/SCHEMA.TABLE among
	// several tables.
	base  string
	csrf  string          // the token every form carries, new for each process
	hosts map[string]bool // host names it answers besides localhost and IP addresses
	inbox inboxTable      // nil without --inbox-table
	// claimCheck is --claim-check: a discard deletes the messages' blobs
	// too; nil without one.
	claimCheck *claimCheck
	log        *slog.Logger
	// noOutbox says why there is no outbox table to show ("" when there
	// is): the outbox pages say it, the inbox pages work.
	noOutbox string
	readOnly bool // --read-only: every change is refused
	// stuckAfter is --stuck-after: a key whose head waited longer is
	// stuck, and pending messages this old with nothing published for as
	// long are no progress.
	stuckAfter time.Duration
	table      string
}

// newConsole returns the console of a table; it answers requests addressed
// to IP addresses, localhost and the names in hosts. It asks for no
// credentials and allows changes until its auth and readOnly are set.
func newConsole(admin outboxdriver.Admin, inbox inboxTable, table string, log *slog.Logger, hosts []string) (*console, error) {
	var token [32]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, err
	}
	c := &console{admin: admin, inbox: inbox, table: table, log: log, csrf: hex.EncodeToString(token[:]), hosts: map[string]bool{}, stuckAfter: consoleStuckAfter}
	for _, h := range hosts {
		c.hosts[hostName(h)] = true
	}
	return c, nil
}

// handler serves the console of one table, behind its checks of host,
// credentials and origin.
func (c *console) handler() http.Handler { return c.guarded(c.routes()) }

// routes are the pages of the table, with no check but the form token's:
// guarded adds the others, once for all tables.
func (c *console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.outboxOnly(c.overview))
	mux.HandleFunc("GET /dead", c.outboxOnly(c.deadList))
	mux.HandleFunc("GET /dead/{id}", c.outboxOnly(c.message))
	mux.HandleFunc("POST /dead/{id}/retry", c.change("retry", c.outboxChange(c.actOnOne)))
	mux.HandleFunc("POST /dead/{id}/discard", c.change("discard", c.outboxChange(c.actOnOne)))
	mux.HandleFunc("POST /dead/retry-matching", c.change("retry-matching", c.outboxChange(c.actOnMatches)))
	mux.HandleFunc("POST /dead/discard-matching", c.change("discard-matching", c.outboxChange(c.actOnMatches)))
	mux.HandleFunc("POST /dead/groups/retry", c.change("retry-group", c.outboxChange(c.actOnGroup)))
	mux.HandleFunc("POST /dead/groups/discard", c.change("discard-group", c.outboxChange(c.actOnGroup)))
	mux.HandleFunc("GET /replay", c.outboxOnly(c.replayPage))
	mux.HandleFunc("POST /replay/confirm", c.change("replay", c.outboxChange(c.replay)))
	mux.HandleFunc("GET /paused", c.outboxOnly(c.pausedPage))
	mux.HandleFunc("POST /paused/pause", c.change("pause", c.outboxChange(c.pauseTopic)))
	mux.HandleFunc("POST /paused/resume", c.change("resume", c.outboxChange(c.resumeTopic)))
	mux.HandleFunc("GET /inbox", c.inboxPage)
	mux.HandleFunc("GET /inbox/parked", c.parkedPage)
	mux.HandleFunc("GET /inbox/parked/{id}", c.parkedMessage)
	mux.HandleFunc("POST /inbox/parked/retry", c.change("retry-parked", c.retryParked))
	mux.HandleFunc("POST /inbox/parked/discard", c.change("discard-parked", c.discardParked))
	return mux
}

// guarded is h behind the checks of host, credentials and origin.
func (c *console) guarded(h http.Handler) http.Handler {
	// The form token stops forms posted from other sites; this stops them
	// earlier, by what the browser says of the form's origin, in case a
	// token ever leaks.
	sameOrigin := http.NewCrossOriginProtection()
	sameOrigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "refused: this form was sent from another site's page (by its Origin or Sec-Fetch-Site header); use the console's own page", http.StatusForbidden)
	}))
	return c.servedHosts(c.authenticated(sameOrigin.Handler(h)))
}

// servedHosts refuses requests addressed to a host name the console does not
// answer to. Without it, a page of evil.example whose owner re-points the
// name at 127.0.0.1 (DNS rebinding) would be same-origin with the console:
// it could read every page, token included, and post the forms.
func (c *console) servedHosts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := hostName(r.Host)
		// An IP address is safe: a browser sends one as Host only to that
		// address, so the page is the console's own.
		if host != "localhost" && net.ParseIP(host) == nil && !c.hosts[host] {
			http.Error(w, fmt.Sprintf("refused: the console does not answer to the host name %q (DNS rebinding protection); open it by IP address or localhost, or start it with --allow-host %s if that name is yours", host, host), http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostName is the host of a Host header or --addr, without port or
// brackets, lowercase and without a trailing dot.
func hostName(hostPort string) string {
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		hostPort = h
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(hostPort, "[]")), ".")
}

// page is what every template gets.
type page struct {
	// Base is the path of the table's pages: "" when the console serves
	// one table, /t/SCHEMA.TABLE among several. Every link starts with it.
	Base                      string
	Title, Table, Flash, CSRF string
	Index                     bool // the index of the tables, which has no table
	ReadOnly                  bool // hides the forms that change messages
}

func (c *console) page(r *http.Request, title string) page {
	return page{Base: c.base, Title: title, Table: c.table, Flash: flash(r.URL.Query()), CSRF: c.csrf, ReadOnly: c.readOnly}
}

// consoleVerbs are the changes a form can ask for, and how a page announces
// them.
var consoleVerbs = map[string]string{"retry": "pending again", "discard": "discarded",
	"retry-parked": "to be handled again by the running consumer", "discard-parked": "discarded",
	"replay": "pending again, to be published again with their ids",
	"pause":  "of the topic held: it is paused", "resume": "due again: the topic is resumed"}

// flash is the announcement of the change a POST redirected from: done names
// the change, n how many messages it changed, and of, for every match of a
// filter, how many the page had shown. Only the console's own sentences come
// out, with numbers, so that a link from elsewhere cannot put its words in
// the console's page.
func flash(q url.Values) string {
	verb, ok := consoleVerbs[q.Get("done")]
	n, err := strconv.Atoi(q.Get("n"))
	if !ok || err != nil || n < 0 {
		return ""
	}
	of, err := strconv.Atoi(q.Get("of"))
	if err != nil || of < n {
		return fmt.Sprintf("%d message(s) %s", n, verb)
	}
	s := fmt.Sprintf("%d of the %d message(s) shown %s", n, of, verb)
	if n < of {
		s += "; the others are no longer dead letters matching the filter"
	}
	return s
}

func (c *console) render(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := consoleTemplates.ExecuteTemplate(&buf, name, data); err != nil {
		c.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}

// refuseOutOfOrder answers a retry that would break a key's order (err
// says which messages and why) with 409, naming the command that can force it.
func refuseOutOfOrder(w http.ResponseWriter, err error, force string) {
	http.Error(w, strings.Replace(err.Error(), "retry again with --force", "retry them with `"+force+"`", 1), http.StatusConflict)
}

func (c *console) fail(w http.ResponseWriter, err error) {
	c.log.Error("outbox console: request failed", slog.Any("error", err))
	http.Error(w, err.Error(), http.StatusInternalServerError)
}
