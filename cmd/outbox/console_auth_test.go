package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// logLines is a logger's output in JSON lines, for a test to read back.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
	t   testing.TB
}

// captureLog returns a logger whose lines the test reads with records; they
// also go to the test's log.
func captureLog(t testing.TB) (*slog.Logger, *logLines) {
	l := &logLines{t: t}
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})), l
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return l.buf.Write(p)
}

// text is everything logged so far.
func (l *logLines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// records are the lines logged so far whose message is msg.
func (l *logLines) records(t testing.TB, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(l.text()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// writeFile writes content to a new file of the test and returns its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// htpasswdLine is a line of an htpasswd file for user and password, with the
// $2y$ prefix htpasswd -B writes.
func htpasswdLine(t testing.TB, user, password string) string {
	t.Helper()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return user + ":" + strings.Replace(string(hash), "$2a$", "$2y$", 1) + "\n"
}

const (
	testToken    = "6f1c0a7e2b9d4c3f8a5e7d1b0c9f2e4a"
	testPassword = "correct horse battery staple"
)

// Every bad --auth value is refused before the console touches the database,
// with an error that names the flag, the value and the fix, and never prints
// the token or a hash from the files.
func TestConsoleRefusesABadAuthFlagNamingTheValueAndTheFix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	secret := "tooshort-9c1"
	hash := strings.TrimPrefix(strings.TrimSpace(htpasswdLine(t, "alice", testPassword)), "alice:")
	for _, tc := range []struct {
		name, secret string
		values       []string
		want         []string
	}{
		{"an unknown kind", "", []string{"kerberos:" + missing}, []string{"bearer:FILE", "basic:FILE", "none"}},
		{"a kind without its file", "", []string{"bearer"}, []string{"bearer:FILE"}},
		{"none with a file", "", []string{"none:" + missing}, []string{"bearer:FILE", "none"}},
		{"none beside another kind", "", []string{"none", "bearer:" + writeFile(t, "token", testToken)}, []string{"none", "alone"}},
		{"two token files", "", []string{"bearer:" + writeFile(t, "t1", testToken), "bearer:" + writeFile(t, "t2", testToken)}, []string{"once"}},
		{"an unreadable token file", "", []string{"bearer:" + missing}, []string{"cannot read", "a file that holds the token"}},
		{"an empty token file", "", []string{"bearer:" + writeFile(t, "empty", "\n \n")}, []string{"empty", "openssl rand -hex 32"}},
		{"a short token", secret, []string{"bearer:" + writeFile(t, "short", secret+"\n")}, []string{"at least 16", "openssl rand -hex 32"}},
		{"a token of two lines", testToken, []string{"bearer:" + writeFile(t, "two", testToken+"\n"+testToken+"\n")}, []string{"one line"}},
		{"an unreadable htpasswd file", "", []string{"basic:" + missing}, []string{"cannot read", "htpasswd -B"}},
		{"an htpasswd file without users", "", []string{"basic:" + writeFile(t, "nousers", "# nobody yet\n\n")}, []string{"no users", "htpasswd -B"}},
		{"a line that is not user:hash", "", []string{"basic:" + writeFile(t, "nocolon", "alice\n")}, []string{"line 1", "user:bcrypt-hash", "htpasswd -B"}},
		{"an SHA-1 hash", "W6ph5Mm5Pz8GgiULbPgzG37mj9g=", []string{"basic:" + writeFile(t, "sha", "alice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n")}, []string{"line 1", "alice", "not a bcrypt hash", "htpasswd -B"}},
		{"an MD5 hash", "$apr1$x5Gz0bQy$", []string{"basic:" + writeFile(t, "md5", "# users\nbob:$apr1$x5Gz0bQy$Jd9x1y0vKqkT8y2Jm0dXg/\n")}, []string{"line 2", "bob", "not a bcrypt hash", "htpasswd -B"}},
		{"a cut bcrypt hash", hash[:40], []string{"basic:" + writeFile(t, "cut", "alice:"+hash[:40]+"\n")}, []string{"line 1", "not a bcrypt hash"}},
		{"a user twice", hash, []string{"basic:" + writeFile(t, "twice", "alice:"+hash+"\nalice:"+hash+"\n")}, []string{"line 2", "alice", "twice"}},
	} {
		args := []string{"console", "--database-url", "sqlite://" + filepath.Join(dir, "nope", "app.db")}
		for _, v := range tc.values {
			args = append(args, "--auth", v)
		}
		code, _, stderr := cli(t, args...)
		if code != 2 {
			t.Errorf("%s: exit %d, stderr %q; want 2 (usage)", tc.name, code, stderr)
		}
		for _, want := range append([]string{"--auth " + tc.values[len(tc.values)-1]}, tc.want...) {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: stderr %q lacks %q", tc.name, stderr, want)
			}
		}
		if tc.secret != "" && strings.Contains(stderr, tc.secret) {
			t.Errorf("%s: stderr %q prints the secret %q", tc.name, stderr, tc.secret)
		}
	}
}

// Listening beyond loopback without --auth would give anyone who reaches the
// port the power to discard messages: the console refuses to start, before
// it listens, and says to add --auth (or --auth none behind a proxy that
// authenticates). Loopback addresses need no --auth.
func TestConsoleRefusesToListenBeyondLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	missing := "sqlite://" + filepath.Join(t.TempDir(), "nope", "app.db")
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		code, _, stderr := cli(t, "console", "--addr", addr, "--database-url", missing)
		if code != 2 || !strings.Contains(stderr, "--addr "+addr) || !strings.Contains(stderr, "add --auth") || !strings.Contains(stderr, "--auth none") {
			t.Errorf("console --addr %s without --auth: exit %d, %q; want 2 and an error saying to add --auth or --auth none", addr, code, stderr)
		}
	}
	none, err := parseConsoleAuth([]string{"none"})
	if err != nil {
		t.Fatal(err)
	}
	bearer, err := parseConsoleAuth([]string{"bearer:" + writeFile(t, "token", testToken)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ip      string
		auth    *consoleAuth
		refused bool
	}{
		{"127.0.0.1", nil, false},
		{"127.0.0.2", nil, false},
		{"::1", nil, false},
		{"0.0.0.0", nil, true},
		{"::", nil, true},
		{"192.0.2.10", nil, true},
		{"", nil, true},
		{"0.0.0.0", none, false},
		{"192.0.2.10", bearer, false},
	} {
		err := refuseExposed(&net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 8080}, tc.auth)
		if (err != nil) != tc.refused {
			t.Errorf("listening on %q with auth %v: %v; want refused %v", tc.ip, tc.auth != nil, err, tc.refused)
		}
	}
	// Allowed beyond loopback, it still warns: of no login at all, or of
	// credentials sent in clear over plain HTTP.
	for _, tc := range []struct {
		ip   string
		auth *consoleAuth
		want string
	}{
		{"127.0.0.1", nil, ""},
		{"127.0.0.1", bearer, ""},
		{"0.0.0.0", none, "no login"},
		{"192.0.2.10", bearer, "in clear"},
	} {
		got := exposedWarning(&net.TCPAddr{IP: net.ParseIP(tc.ip), Port: 8080}, tc.auth)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("warning for %s with auth %v: %q; want one saying %q", tc.ip, tc.auth != nil, got, tc.want)
		}
	}
}

// authConsole is a console of a table with one dead message, behind basic
// auth (alice, and bob whose hash has the $2a$ prefix of other tools) and a
// bearer token, logging to log.
func authConsole(t *testing.T, log *slog.Logger) *httptest.Server {
	t.Helper()
	a2a := strings.Replace(htpasswdLine(t, "bob", "bob's "+testPassword), "$2y$", "$2a$", 1)
	auth, err := parseConsoleAuth([]string{
		"basic:" + writeFile(t, "htpasswd", "# console users\n"+htpasswdLine(t, "alice", testPassword)+"\n"+a2a),
		"bearer:" + writeFile(t, "token", testToken+"\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := newConsole(&fakeAdmin{}, nil, "public.outbox", log, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.auth = auth
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	return srv
}

// A wrong password, an unknown user, a wrong token or none at all get 401
// with the challenge that makes a browser ask for a password; the right
// password or token gets the page. A refused login is logged at WARN with
// the remote address, once a minute per address, and no password or token
// is ever logged.
func TestConsoleLetsInOnlyTheRightPasswordOrToken(t *testing.T) {
	t.Parallel()
	log, lines := captureLog(t)
	srv := authConsole(t, log)
	for _, tc := range []struct {
		name  string
		setup func(*http.Request)
		want  int
	}{
		{"no credentials", func(*http.Request) {}, http.StatusUnauthorized},
		{"a wrong password", func(r *http.Request) { r.SetBasicAuth("alice", "wrong "+testPassword) }, http.StatusUnauthorized},
		{"bob's password for alice", func(r *http.Request) { r.SetBasicAuth("alice", "bob's "+testPassword) }, http.StatusUnauthorized},
		{"an unknown user", func(r *http.Request) { r.SetBasicAuth("mallory", testPassword) }, http.StatusUnauthorized},
		{"the token as a password", func(r *http.Request) { r.SetBasicAuth("alice", testToken) }, http.StatusUnauthorized},
		{"a wrong token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken[:31]+"b") }, http.StatusUnauthorized},
		{"the token with a suffix", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken+"0") }, http.StatusUnauthorized},
		{"an unknown scheme", func(r *http.Request) { r.Header.Set("Authorization", "Digest username=\"alice\"") }, http.StatusUnauthorized},
		{"alice's password", func(r *http.Request) { r.SetBasicAuth("alice", testPassword) }, http.StatusOK},
		{"alice's password again", func(r *http.Request) { r.SetBasicAuth("alice", testPassword) }, http.StatusOK},
		{"bob's password", func(r *http.Request) { r.SetBasicAuth("bob", "bob's "+testPassword) }, http.StatusOK},
		{"the token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+testToken) }, http.StatusOK},
	} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/dead", nil)
		if err != nil {
			t.Fatal(err)
		}
		tc.setup(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %q; want %d", tc.name, resp.StatusCode, body, tc.want)
		}
		challenge := strings.Join(resp.Header.Values("WWW-Authenticate"), ", ")
		switch {
		case tc.want == http.StatusUnauthorized && !strings.Contains(challenge, `Basic realm="outbox console"`):
			t.Errorf("%s: WWW-Authenticate %q; want the Basic challenge a browser answers", tc.name, challenge)
		case tc.want == http.StatusOK && !strings.Contains(string(body), "Dead letters"):
			t.Errorf("%s: got %q; want the dead letters page", tc.name, body)
		}
	}
	refused := lines.records(t, "outbox console: login refused")
	if len(refused) != 1 {
		t.Fatalf("%d WARN lines for the refused logins; want one (the first, then one a minute per address)", len(refused))
	}
	if r := refused[0]; r["level"] != "WARN" || !strings.HasPrefix(r["remote"].(string), "127.0.0.1:") || r["user"] != "alice" {
		t.Errorf("refused login logged as %v; want WARN with the remote address and the user", r)
	}
	for _, secret := range []string{testPassword, testToken, testToken[:31]} {
		if strings.Contains(lines.text(), secret) {
			t.Errorf("the log holds a password or token %q:\n%s", secret, lines.text())
		}
	}
}

// The command wires the flags: behind basic auth and --read-only it asks a
// browser for the password, then serves a page that says it is read-only.
func TestConsoleCommandServesItsPagesBehindBasicAuth(t *testing.T) {
	t.Parallel()
	url := "sqlite://" + filepath.Join(t.TempDir(), "app.db")
	mustCLI(t, "migrate", "up", "--database-url", url)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	htpasswd := writeFile(t, "htpasswd", htpasswdLine(t, "alice", testPassword))
	go func() {
		done <- run(ctx, []string{"console", "--addr", addr, "--database-url", url, "--inbox-table", "", "--auth", "basic:" + htpasswd, "--read-only"}, &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("console exited %d: %s", code, errOut.String())
		}
	})
	fetch := func(user, password string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := fetch("", "")
		if code == http.StatusUnauthorized {
			break
		}
		select {
		case exit := <-done:
			done <- exit
			t.Fatalf("the console exited %d: %s", exit, errOut.String())
		default:
		}
		if code != 0 || time.Now().After(deadline) {
			t.Fatalf("GET / without credentials: %d %q; want 401; console log:\n%s", code, body, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := fetch("alice", "not "+testPassword); code != http.StatusUnauthorized {
		t.Errorf("GET / with a wrong password: %d; want 401", code)
	}
	if code, body := fetch("alice", testPassword); code != http.StatusOK || !strings.Contains(body, "read-only") {
		t.Errorf("GET / with alice's password: %d %q; want the overview saying read-only", code, body)
	}
}
