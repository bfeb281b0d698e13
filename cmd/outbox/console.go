package main

import (
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxpg"
)

//go:embed console.html
var consoleHTML string

// consoleTemplates are the console's pages: plain HTML forms, no script and
// nothing loaded from elsewhere, so the console works without internet
// access.
var consoleTemplates = template.Must(template.New("console").Funcs(template.FuncMap{
	"short": func(s string) string { return oneLine(s, 140) },
}).Parse(consoleHTML))

const (
	// consoleScanLimit bounds how many dead messages one filter reads.
	consoleScanLimit = 10000
	// consoleRows is how many matching dead messages a page lists.
	consoleRows = 200
	// consoleBatch is how many ids one retry or discard call takes.
	consoleBatch = 1000
)

func newConsoleCommand(g *globalFlags) *cobra.Command {
	var (
		addr           string
		allowHosts     []string
		authValues     []string
		inboxTableName string
		readOnly       bool
	)
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve a web page to watch the table and handle dead letters",
		Long: `console serves a web page on --addr: the table's counts (pending, in flight, dead,
oldest pending age) and its dead letters, which it filters by topic and error text, shows one
by one (headers, payload as JSON or hex) and retries or discards, one or every match of a filter;
and, with --inbox-table, the consumers of the inbox table: their records, the duplicates they
skipped, those kept for pending outgoing messages and the messages they parked, which it lists and
hands back to the running consumer.

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

--read-only shows everything and changes nothing: retry and discard are refused (403) and their
buttons are not shown. Every change asked, done or refused, is logged at INFO as one line
"outbox console: audit" (audit=true) naming the user (or "bearer", or "anonymous" without
--auth), the remote address, the action, the table, the ids or the filter and how many, and the
outcome.

It answers only requests addressed to an IP address, localhost, the host of --addr or a name
given with --allow-host (say, the name your proxy forwards), so that a site whose name its owner
points at 127.0.0.1 (DNS rebinding) cannot read it. Every change is a POST carrying a token of
the page and sent from the console's own page (Origin, Sec-Fetch-Site), so another site cannot
make a browser retry or discard messages. "Every match" acts only on the matches the page
counted, not on messages that died since.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Flags first, then the address, then the database: a console
			// that would be open to all is refused before it listens.
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
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				ln.Close()
				return err
			}
			defer b.close()
			if host, _, err := net.SplitHostPort(addr); err == nil && host != "" {
				allowHosts = append(allowHosts, host)
			}
			var inbox inboxTable
			if inboxTableName != "" {
				if inbox, err = b.inbox(cmd.Context(), inboxTableName); err != nil {
					ln.Close()
					return err
				}
			}
			c, err := newConsole(b.admin, inbox, b.store.Name(), g.logger, allowHosts)
			if err != nil {
				ln.Close()
				return err
			}
			c.auth, c.readOnly = auth, readOnly
			// Beyond loopback, a client that opens connections and sends
			// nothing must not keep them.
			srv := &http.Server{Handler: c.handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: time.Minute, IdleTimeout: 2 * time.Minute}
			g.logger.Info("outbox console: serving", slog.String("url", "http://"+ln.Addr().String()+"/"), slog.String("table", b.store.Name()),
				slog.String("auth", c.authKinds()), slog.Bool("read_only", readOnly))
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
	cmd.Flags().BoolVar(&readOnly, "read-only", false, "show the tables but refuse every retry and discard (403)")
	return cmd
}

// console serves the pages of one outbox table.
type console struct {
	admin    outboxdriver.Admin
	auth     *consoleAuth    // nil: anyone who reaches it (loopback, or --auth none)
	csrf     string          // the token every form carries, new for each process
	hosts    map[string]bool // host names it answers besides localhost and IP addresses
	inbox    inboxTable      // nil without --inbox-table
	log      *slog.Logger
	readOnly bool // --read-only: every change is refused
	table    string
}

// newConsole returns the console of a table; it answers requests addressed
// to IP addresses, localhost and the names in hosts. It asks for no
// credentials and allows changes until its auth and readOnly are set.
func newConsole(admin outboxdriver.Admin, inbox inboxTable, table string, log *slog.Logger, hosts []string) (*console, error) {
	var token [32]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, err
	}
	c := &console{admin: admin, inbox: inbox, table: table, log: log, csrf: hex.EncodeToString(token[:]), hosts: map[string]bool{}}
	for _, h := range hosts {
		c.hosts[hostName(h)] = true
	}
	return c, nil
}

func (c *console) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /dead", c.deadList)
	mux.HandleFunc("GET /dead/{id}", c.message)
	mux.HandleFunc("POST /dead/{id}/retry", c.change("retry", c.actOnOne))
	mux.HandleFunc("POST /dead/{id}/discard", c.change("discard", c.actOnOne))
	mux.HandleFunc("POST /dead/retry-matching", c.change("retry-matching", c.actOnMatches))
	mux.HandleFunc("POST /dead/discard-matching", c.change("discard-matching", c.actOnMatches))
	mux.HandleFunc("GET /inbox", c.inboxPage)
	mux.HandleFunc("GET /inbox/parked", c.parkedPage)
	mux.HandleFunc("POST /inbox/parked/retry", c.change("retry-parked", c.retryParked))
	// The form token stops forms posted from other sites; this stops them
	// earlier, by what the browser says of the form's origin, in case a
	// token ever leaks.
	sameOrigin := http.NewCrossOriginProtection()
	sameOrigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "refused: this form was sent from another site's page (by its Origin or Sec-Fetch-Site header); use the console's own page", http.StatusForbidden)
	}))
	return c.servedHosts(c.authenticated(sameOrigin.Handler(mux)))
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
	Title, Table, Flash, CSRF string
	ReadOnly                  bool // hides the forms that change messages
}

func (c *console) page(r *http.Request, title string) page {
	return page{Title: title, Table: c.table, Flash: flash(r.URL.Query()), CSRF: c.csrf, ReadOnly: c.readOnly}
}

// consoleVerbs are the changes a form can ask for, and how a page announces
// them.
var consoleVerbs = map[string]string{"retry": "pending again", "discard": "discarded",
	"retry-parked": "to be handled again by the running consumer"}

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

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	st, err := c.admin.Stats(r.Context())
	if err != nil {
		c.fail(w, err)
		return
	}
	oldest := "none"
	if st.Pending > 0 {
		oldest = st.OldestPending.Round(time.Millisecond).String()
	}
	rate := "n/a"
	if st.Published > 0 {
		rate = fmt.Sprintf("%.1f", float64(st.PublishedLastMinute)/60)
	}
	c.render(w, "overview", struct {
		page
		Stats            outboxdriver.Stats
		Oldest, Rate, At string
	}{c.page(r, "Overview"), st, oldest, rate, time.Now().UTC().Format("15:04:05 MST")})
}

// deadFilter selects dead messages by exact topic and error text.
type deadFilter struct{ topic, query string }

func filterOf(v url.Values) deadFilter {
	return deadFilter{topic: strings.TrimSpace(v.Get("topic")), query: strings.TrimSpace(v.Get("q"))}
}

func (f deadFilter) match(m outbox.Message) bool {
	return (f.topic == "" || m.Topic == f.topic) &&
		(f.query == "" || strings.Contains(strings.ToLower(m.LastError), strings.ToLower(f.query)))
}

// matches reads up to consoleScanLimit dead messages and returns those f
// selects, and whether it stopped at the limit.
func (c *console) matches(ctx context.Context, f deadFilter) (found []outbox.Message, scanned int, truncated bool, err error) {
	after := uuid.Nil
	for scanned < consoleScanLimit {
		page, err := c.admin.ListDead(ctx, after, min(500, consoleScanLimit-scanned))
		if err != nil {
			return nil, scanned, false, err
		}
		for _, m := range page {
			if f.match(m) {
				found = append(found, m)
			}
		}
		scanned += len(page)
		if len(page) < 500 {
			return found, scanned, false, nil
		}
		after = page[len(page)-1].ID
	}
	return found, scanned, true, nil
}

func (c *console) deadList(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r.URL.Query())
	found, scanned, truncated, err := c.matches(r.Context(), f)
	if err != nil {
		c.fail(w, err)
		return
	}
	rows := found[:min(len(found), consoleRows)]
	c.render(w, "dead", struct {
		page
		Topic, Query, Seen string
		Rows               []outbox.Message
		Matches, Scanned   int
		Truncated          bool
	}{c.page(r, "Dead letters"), f.topic, f.query, seenField(found), rows, len(found), scanned, truncated})
}

// seenField lists the ids of the matches a page counted, for its "every
// match" form to act on those only: a message that dies after the page was
// read matches the filter too, but the user never saw it. UUIDv7 ids order
// by creation, not by death, so the highest id seen would not tell it apart.
// 16 bytes an id in base64: at most some 210 KB, for consoleScanLimit ids.
func seenField(ms []outbox.Message) string {
	b := make([]byte, 0, 16*len(ms))
	for _, m := range ms {
		b = append(b, m.ID[:]...)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// seenIDs decodes seenField.
func seenIDs(s string) (map[uuid.UUID]bool, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 || len(b)%16 != 0 {
		return nil, errors.New("the form does not say which messages the page showed: reload the dead letters page and try again")
	}
	ids := make(map[uuid.UUID]bool, len(b)/16)
	for ; len(b) > 0; b = b[16:] {
		ids[uuid.UUID(b[:16])] = true
	}
	return ids, nil
}

func (c *console) message(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a message id", http.StatusBadRequest)
		return
	}
	m, err := c.admin.Get(r.Context(), id)
	if errors.Is(err, outbox.ErrNotFound) {
		http.Error(w, "no message "+id.String()+" (published, discarded or never written)", http.StatusNotFound)
		return
	}
	if err != nil {
		c.fail(w, err)
		return
	}
	kind, payload := showPayload(m.Payload)
	c.render(w, "message", struct {
		page
		M                    outbox.Message
		PayloadKind, Payload string
	}{c.page(r, m.ID.String()), m, kind, payload})
}

// showPayload renders a payload: indented JSON, text, or a hex dump.
func showPayload(p []byte) (kind, text string) {
	var buf bytes.Buffer
	switch {
	case json.Valid(p) && json.Indent(&buf, p, "", "  ") == nil:
		return "JSON", buf.String()
	case utf8.Valid(p):
		return "text", string(p)
	default:
		return "binary, hex", hex.Dump(p)
	}
}

func (c *console) actOnOne(w http.ResponseWriter, r *http.Request, line *auditLine) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		http.Error(w, "not a message id", http.StatusBadRequest)
		return
	}
	line.ids([]uuid.UUID{id})
	c.act(w, r, line, []uuid.UUID{id}, -1, "/dead")
}

func (c *console) actOnMatches(w http.ResponseWriter, r *http.Request, line *auditLine) {
	f := filterOf(r.PostForm)
	line.add(slog.String("topic", f.topic), slog.String("q", f.query))
	seen, err := seenIDs(r.PostForm.Get("seen"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The matches now, of which only those the page showed: the filter
	// still holds for them and they are still dead.
	found, _, _, err := c.matches(r.Context(), f)
	if err != nil {
		c.fail(w, err)
		return
	}
	var ids []uuid.UUID
	for _, m := range found {
		if seen[m.ID] {
			ids = append(ids, m.ID)
		}
	}
	line.add(slog.Int("shown", len(seen)), slog.Int("messages", len(ids)))
	c.act(w, r, line, ids, len(seen), "/dead?"+url.Values{"topic": {f.topic}, "q": {f.query}}.Encode())
}

// act retries or discards ids, as line.action says, in batches (a retry
// that keeps key order in one call), and sends the browser back to back
// with what it did; shown is how many messages the page had shown, or -1
// when the user chose one.
func (c *console) act(w http.ResponseWriter, r *http.Request, line *auditLine, ids []uuid.UUID, shown int, back string) {
	action, _ := strings.CutSuffix(line.action, "-matching")
	var call func(context.Context, ...uuid.UUID) (int, error)
	switch action {
	case "retry":
		call = c.admin.RetryDead
	case "discard":
		call = c.admin.DiscardDead
	default:
		http.NotFound(w, r)
		return
	}
	done, left := 0, ids
	defer func() { line.changed = done }()
	if action == "retry" && len(ids) > 0 {
		// The console has no --force: a retry that would break a key's
		// order is the CLI's, where the count is spelt out. A store that
		// can looks at the counts in the step that retries, all ids at
		// once, so that it retries them all or none.
		var err error
		if keepOrder, ok := c.admin.(outboxdriver.KeyOrderRetrier); ok {
			var overtaken []outbox.Message
			done, overtaken, err = keepOrder.RetryDeadUnlessOvertaken(r.Context(), ids, false)
			if err != nil {
				c.fail(w, fmt.Errorf("%s: %w", action, err))
				return
			}
			left = nil // retried, or refused, whole
			err = refuseOvertaken(overtaken)
		} else {
			err = deadRetryKeepsKeyOrder(r.Context(), c.admin, ids)
		}
		if err != nil {
			refuseOutOfOrder(w, err, "outbox dead retry --force ID")
			return
		}
	}
	for start := 0; start < len(left); start += consoleBatch {
		n, err := call(r.Context(), left[start:min(start+consoleBatch, len(left))]...)
		done += n
		if err != nil {
			c.fail(w, fmt.Errorf("%s: %d of %d done, then: %w", action, done, len(ids), err))
			return
		}
	}
	result := url.Values{"done": {action}, "n": {strconv.Itoa(done)}}
	if shown >= 0 {
		result.Set("of", strconv.Itoa(shown))
	}
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, back+sep+result.Encode(), http.StatusSeeOther)
}
