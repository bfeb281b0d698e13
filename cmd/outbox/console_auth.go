package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/go-outbox/outbox/internal/loglimit"
)

const (
	// consoleRealm names the console in the browser's password prompt.
	consoleRealm = "outbox console"
	// consoleTokenMin is the shortest bearer token accepted: a guessable
	// one would undo the point of asking for it.
	consoleTokenMin = 16
	// consoleVerifiedMax bounds the credentials remembered as verified.
	consoleVerifiedMax = 64
	// userAnonymous is who acts on a console without --auth.
	userAnonymous = "anonymous"
	// userBearer is who acts with the bearer token, which names nobody.
	userBearer = "bearer"
)

// consoleAuthKinds is the fix every --auth value error ends with.
const consoleAuthKinds = "give bearer:FILE (a file holding one token), basic:FILE (an htpasswd file of bcrypt hashes, made with htpasswd -B) or none (no login: only behind a proxy that authenticates)"

// bcryptHash is the shape of the bcrypt hashes htpasswd -B (and other
// tools) write. The bcrypt package alone would take some other hashes for
// bcrypt ones of an old version, and refuse them only at login.
var bcryptHash = regexp.MustCompile(`^\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}$`)

// consoleAuth checks the credentials of requests, as --auth asks. A nil
// *consoleAuth means --auth was not given; one with neither users nor token
// is --auth none.
type consoleAuth struct {
	// dummy is a hash to compare an unknown user's password with, so that
	// the time of an answer does not tell which users exist.
	dummy    []byte
	refusals loglimit.Limiter // of the WARN line of a refused login, per address
	token    *[sha256.Size]byte
	users    map[string][]byte // basic: user name to bcrypt hash

	// verified remembers credentials bcrypt accepted, by their HMAC under
	// key, a secret of this process: a browser sends the password with
	// every page, and bcrypt costs tens of milliseconds by design.
	key      [32]byte
	mu       sync.Mutex
	verified map[[sha256.Size]byte]bool
}

// parseConsoleAuth reads the files the --auth values name. It returns nil
// when no value is given.
func parseConsoleAuth(values []string) (*consoleAuth, error) {
	if len(values) == 0 {
		return nil, nil
	}
	a := &consoleAuth{refusals: loglimit.Limiter{Interval: time.Minute}, verified: map[[sha256.Size]byte]bool{}}
	if _, err := rand.Read(a.key[:]); err != nil {
		return nil, err
	}
	kinds := map[string]string{}
	for _, v := range values {
		kind, file, withFile := strings.Cut(v, ":")
		if !(kind == "none" && !withFile || (kind == "bearer" || kind == "basic") && file != "") {
			return nil, usagef("--auth %s: not a form this flag takes; %s", v, consoleAuthKinds)
		}
		if first, ok := kinds[kind]; ok {
			return nil, usagef("--auth %s: %s is given twice (first --auth %s); give each kind once", v, kind, first)
		}
		kinds[kind] = v
		if _, ok := kinds["none"]; ok && len(kinds) > 1 {
			return nil, usagef("--auth %s: --auth none turns the login off and must be given alone; drop it or the others", v)
		}
		var err error
		switch kind {
		case "bearer":
			err = a.readToken(file)
		case "basic":
			err = a.readHtpasswd(file)
		}
		if err != nil {
			return nil, usagef("--auth %s: %w", v, err)
		}
	}
	return a, nil
}

// readToken reads the bearer token: one line, whose surrounding blanks and
// line end do not count. Errors never quote the file: it holds a secret.
func (a *consoleAuth) readToken(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("cannot read the token file (%w); give a file that holds the token on one line (openssl rand -hex 32 > %s)", pathless(err), file)
	}
	token := strings.TrimSpace(string(b))
	switch {
	case token == "":
		return fmt.Errorf("the token file is empty; put a token in it: openssl rand -hex 32 > %s", file)
	case strings.ContainsAny(token, "\r\n"):
		return fmt.Errorf("the token file holds more than one line; put the token alone on one line (openssl rand -hex 32 > %s)", file)
	case strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0:
		return fmt.Errorf("the token holds a blank, a control character or a non-ASCII one, which an Authorization header cannot carry as it is; use letters and digits (openssl rand -hex 32 > %s)", file)
	case len(token) < consoleTokenMin:
		return fmt.Errorf("the token is shorter than %d characters, easy to guess; use at least %d (openssl rand -hex 32 > %s)", consoleTokenMin, consoleTokenMin, file)
	}
	sum := sha256.Sum256([]byte(token))
	a.token = &sum
	return nil
}

// readHtpasswd reads the users of an htpasswd file: user:bcrypt-hash lines,
// blank lines and # comments. Errors name the line and the user, never the
// hash: a line that is not one may hold a password in clear.
func (a *consoleAuth) readHtpasswd(file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("cannot read the htpasswd file (%w); create it with htpasswd -B -c %s USER", pathless(err), file)
	}
	a.users = map[string][]byte{}
	firstLine := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		user, hash, ok := strings.Cut(line, ":")
		if !ok || user == "" || hash == "" {
			return fmt.Errorf("line %d is not user:bcrypt-hash; write the file with htpasswd -B %s USER", n, file)
		}
		if !bcryptHash.MatchString(hash) {
			return fmt.Errorf("line %d (user %s): not a bcrypt hash (htpasswd writes other kinds without -B); set the password again with htpasswd -B %s %s", n, user, file, user)
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			return fmt.Errorf("line %d (user %s): not a bcrypt hash (%w); set the password again with htpasswd -B %s %s", n, user, err, file, user)
		}
		if first, ok := firstLine[user]; ok {
			return fmt.Errorf("line %d: user %s is given twice (first on line %d); keep one line per user", n, user, first)
		}
		firstLine[user] = n
		a.users[user] = []byte(hash)
		if a.dummy == nil {
			a.dummy = []byte(hash)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("cannot read the htpasswd file (%w); write it with htpasswd -B %s USER", err, file)
	}
	if len(a.users) == 0 {
		return fmt.Errorf("the htpasswd file has no users; add one with htpasswd -B %s USER", file)
	}
	return nil
}

// pathless is the reason of a file error without the path, which the
// message names already.
func pathless(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// refuseExposed refuses to listen on addr, beyond loopback, without --auth:
// anyone who reached the port could retry and discard messages.
func refuseExposed(addr *net.TCPAddr, auth *consoleAuth) error {
	if auth != nil || addr.IP != nil && addr.IP.IsLoopback() {
		return nil
	}
	return errors.New("it listens beyond loopback and the console has no login: anyone who reaches the port could retry and discard messages; " +
		"add --auth basic:HTPASSWD-FILE (browsers) or --auth bearer:TOKEN-FILE (scripts), or --auth none to accept the risk (behind a proxy that authenticates), " +
		"or listen on 127.0.0.1")
}

// consoleUser is the context key of who sent a request.
type consoleUser struct{}

// userOf is who sent r: a basic-auth user name, userBearer or userAnonymous.
func userOf(r *http.Request) string {
	if u, ok := r.Context().Value(consoleUser{}).(string); ok {
		return u
	}
	return userAnonymous
}

// authenticated lets through requests with the credentials --auth asks for,
// noting who sent them, and answers the others 401.
func (c *console) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := userAnonymous
		if a := c.auth; a != nil && (a.users != nil || a.token != nil) {
			var why string
			if user, why = a.check(r); why != "" {
				a.refuse(w, r, c.log, user, why)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), consoleUser{}, user)))
	})
}

// check returns who sent r, and why it is refused ("" if it is not).
func (a *consoleAuth) check(r *http.Request) (user, why string) {
	scheme, credentials, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	switch {
	case scheme == "":
		return "", "none"
	case strings.EqualFold(scheme, "Basic") && a.users != nil:
		user, password, ok := r.BasicAuth()
		if !ok {
			return "", "malformed basic credentials"
		}
		if !a.passwordMatches(user, password) {
			return user, "wrong password or unknown user"
		}
		return user, ""
	case strings.EqualFold(scheme, "Bearer") && a.token != nil:
		// Comparing digests takes the same time whatever the length of
		// the token sent.
		sum := sha256.Sum256([]byte(strings.TrimSpace(credentials)))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
			return userBearer, "wrong token"
		}
		return userBearer, ""
	default:
		return "", "the " + strings.ToLower(scheme) + " scheme is not enabled"
	}
}

// passwordMatches reports whether password is user's.
func (a *consoleAuth) passwordMatches(user, password string) bool {
	mac := hmac.New(sha256.New, a.key[:])
	mac.Write([]byte(user))
	mac.Write([]byte{0})
	mac.Write([]byte(password))
	var seen [sha256.Size]byte
	mac.Sum(seen[:0])
	a.mu.Lock()
	ok := a.verified[seen]
	a.mu.Unlock()
	if ok {
		return true
	}
	hash, known := a.users[user]
	if !known {
		hash = a.dummy
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil || !known {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.verified) >= consoleVerifiedMax {
		clear(a.verified)
	}
	a.verified[seen] = true
	return true
}

// refuse answers 401 with a challenge per kind of --auth, the Basic one
// making a browser ask for a user and password, and logs the refusal of
// credentials (not of a request that sent none, as a browser's first one
// does) once a minute per remote address.
func (a *consoleAuth) refuse(w http.ResponseWriter, r *http.Request, log *slog.Logger, user, why string) {
	if a.users != nil {
		w.Header().Add("WWW-Authenticate", `Basic realm="`+consoleRealm+`", charset="UTF-8"`)
	}
	if a.token != nil {
		w.Header().Add("WWW-Authenticate", `Bearer realm="`+consoleRealm+`"`)
	}
	http.Error(w, "unauthorized: sign in to the outbox console with the user and password, or the bearer token, its operator gave you", http.StatusUnauthorized)
	if why == "none" || !a.refusals.Allow(hostName(r.RemoteAddr)) {
		return
	}
	log.Warn("outbox console: login refused", slog.String("remote", r.RemoteAddr), slog.String("user", user),
		slog.String("reason", why), slog.String("note", "at most one line a minute per remote address"))
}

// authKinds says how the console asks for credentials, for its first log
// line.
func (c *console) authKinds() string {
	var kinds []string
	if c.auth != nil && c.auth.users != nil {
		kinds = append(kinds, "basic")
	}
	if c.auth != nil && c.auth.token != nil {
		kinds = append(kinds, "bearer")
	}
	if kinds == nil {
		return "none"
	}
	return strings.Join(kinds, "+")
}

// exposedWarning is what to warn of when the console listens on addr
// beyond loopback, as auth allows it to ("" on loopback).
func exposedWarning(addr *net.TCPAddr, auth *consoleAuth) string {
	switch {
	case addr.IP != nil && addr.IP.IsLoopback():
		return ""
	case auth == nil || auth.users == nil && auth.token == nil:
		return "the console listens beyond loopback with no login (--auth none): let only a proxy that authenticates reach its port"
	default:
		return "the console listens beyond loopback over plain HTTP: passwords and tokens cross the network in clear; reach it through a TLS proxy or an SSH tunnel"
	}
}
