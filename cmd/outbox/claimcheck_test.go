package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
	"github.com/go-outbox/outbox/outboxsqlite"
	"github.com/go-outbox/outbox/relaytest"
)

// A relay given --claim-check puts a payload over the threshold in the blob
// store and publishes a reference to it; a smaller one goes as it is. A
// discard with the same --claim-check, from the CLI or the console, deletes
// the blob of each message it discarded, and only of those.
func TestClaimCheckFlagSendsLargePayloadsByReferenceAndDiscardsDeleteTheirBlobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blobDir := filepath.Join(dir, "blobs")
	claimCheck := "file:" + blobDir + "?threshold=16&prefix=cc/&retention=24h"
	db := []string{"--database-url", "sqlite://" + filepath.Join(dir, "app.db")}
	with := func(args ...string) []string { return append(append([]string{}, args...), db...) }
	mustCLI(t, with("migrate", "up")...)
	large := `{"lines":["a","b","c","d"]}`
	largeID := uuid.MustParse(strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--payload", large)...)))
	smallID := uuid.MustParse(strings.TrimSpace(mustCLI(t, with("send", "--topic", "orders.created", "--payload", `{}`)...)))

	// A blob put two days ago, past the store's retention: the relay's
	// sweep deletes it.
	cfg := outbox.ClaimCheckConfig{Prefix: "cc/"}
	blobs := outbox.DirBlobStore(blobDir)
	expired := uuid.Must(uuid.NewV7())
	if err := blobs.Put(t.Context(), cfg.Key(expired), []byte("old")); err != nil {
		t.Fatal(err)
	}
	twoDaysAgo := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(blobDir, "cc%2F"+expired.String()), twoDaysAgo, twoDaysAgo); err != nil {
		t.Fatal(err)
	}

	bin, err := buildCLI()
	if err != nil {
		t.Fatal(err)
	}
	relay := exec.Command(bin, with("relay", "--claim-check", claimCheck, "--log-level", "warn")...)
	var out strings.Builder
	relay.Stdout = &out
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Process.Kill(); _ = relay.Wait() }()
	store, err := outboxsqlite.Open(t.Context(), filepath.Join(dir, "app.db"), outboxsqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	waitUntil(t, 30*time.Second, "the relay to publish both messages and sweep the expired blob", func() bool {
		st, err := store.Stats(t.Context())
		_, gone := blobs.Get(t.Context(), cfg.Key(expired))
		return err == nil && st.Pending == 0 && errors.Is(gone, outbox.ErrBlobNotFound)
	})
	_ = relay.Process.Signal(syscall.SIGTERM)
	if err := relay.Wait(); err != nil {
		t.Fatalf("relay: %v", err)
	}

	published := publishedLines(t, out.String())
	if m := published[largeID]; m.Headers[outbox.HeaderClaimCheck] == "" || len(m.Payload) != 0 {
		t.Fatalf("the %d-byte payload was published as %+v; want an empty payload and an %s header", len(large), m, outbox.HeaderClaimCheck)
	}
	if got, err := blobs.Get(t.Context(), cfg.Key(largeID)); err != nil || string(got) != large {
		t.Fatalf("blob of %s: %q, %v; want the payload %q", largeID, got, err, large)
	}
	if m := published[smallID]; m.Headers[outbox.HeaderClaimCheck] != "" || string(m.Payload) != "{}" {
		t.Fatalf("the 2-byte payload was published as %+v; want it as it is, with no reference", m)
	}
	if _, err := blobs.Get(t.Context(), cfg.Key(smallID)); !errors.Is(err, outbox.ErrBlobNotFound) {
		t.Fatalf("blob of the small message %s: %v; want none", smallID, err)
	}

	// Two dead messages whose blobs a relay had put, and a third blob of
	// a message that is not dead: the CLI discards one, the console the
	// other, and the third blob stays.
	byCLI, byConsole, pending := deadWithBlob(t, store, blobs, cfg), deadWithBlob(t, store, blobs, cfg), uuid.Must(uuid.NewV7())
	if err := blobs.Put(t.Context(), cfg.Key(pending), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli(t, with("dead", "discard", "--claim-check", claimCheck, byCLI.String(), pending.String())...); code != 1 ||
		!strings.Contains(out, "1 message(s) discarded") || !strings.Contains(errOut, "1 of 2 id(s) matched no dead message") {
		t.Fatalf("dead discard of a dead and a pending message: exit %d, printed %q, %q; want 1 discarded and the other named, exit 1", code, out, errOut)
	}
	cc, err := openClaimCheck(t.Context(), claimCheck, false)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newConsole(store, nil, store.Name(), relaytest.TestLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.claimCheck = cc
	srv := httptest.NewServer(c.handler())
	t.Cleanup(srv.Close)
	if code, page := postForm(t, srv.URL+"/dead/"+byConsole.String()+"/discard", "", map[string][]string{"csrf": {c.csrf}}); code != http.StatusSeeOther {
		t.Fatalf("console discard of %s: %d %q", byConsole, code, page)
	}
	for _, id := range []uuid.UUID{byCLI, byConsole} {
		if _, err := blobs.Get(t.Context(), cfg.Key(id)); !errors.Is(err, outbox.ErrBlobNotFound) {
			t.Fatalf("blob of discarded message %s: %v; want it deleted", id, err)
		}
	}
	if _, err := blobs.Get(t.Context(), cfg.Key(pending)); err != nil {
		t.Fatalf("blob of %s, which no discard matched: %v; want it kept", pending, err)
	}
}

// deadWithBlob writes a message, dead-letters it as a relay would, and puts
// the blob a relay's claim check would have put before its attempt.
func deadWithBlob(t *testing.T, store *outboxsqlite.Store, blobs outbox.BlobStore, cfg outbox.ClaimCheckConfig) uuid.UUID {
	t.Helper()
	m := &outbox.Message{Topic: "orders.created", Payload: []byte(`{"big":true}`)}
	w, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Transact(t.Context(), func(ctx context.Context, tx *sql.Tx) error { return w.Write(ctx, tx, m) }); err != nil {
		t.Fatal(err)
	}
	token := uuid.Must(uuid.NewV7())
	if got, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{}, outboxdriver.Claim{Limit: 10, Lease: time.Minute, Token: token}); err != nil || len(got) != 1 {
		t.Fatalf("claim %s: %v, %v", m.ID, got, err)
	}
	if _, err := store.SettleAndClaim(t.Context(), outboxdriver.Settlement{Token: token, Dead: []outboxdriver.Failure{{ID: m.ID, Error: "refused"}}}, outboxdriver.Claim{}); err != nil {
		t.Fatal(err)
	}
	if err := blobs.Put(t.Context(), cfg.Key(m.ID), m.Payload); err != nil {
		t.Fatal(err)
	}
	return m.ID
}

// publishedLine is what the stdout publisher prints of a message.
type publishedLine struct {
	ID      uuid.UUID         `json:"id"`
	Headers map[string]string `json:"headers"`
	Payload json.RawMessage   `json:"payload"`
}

// publishedLines reads the stdout publisher's JSON lines by message id.
func publishedLines(t *testing.T, out string) map[uuid.UUID]publishedLine {
	t.Helper()
	byID := map[uuid.UUID]publishedLine{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var m publishedLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("relay printed %q, not a message: %v", sc.Text(), err)
		}
		byID[m.ID] = m
	}
	return byID
}

// Every mistake in a --claim-check URL is refused before anything runs,
// naming the URL and the fix.
func TestClaimCheckFlagRefusesABadURLNamingTheFix(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for url, want := range map[string]string{
		"ftp://host/x":                          "use s3://BUCKET/PREFIX or file:DIR",
		"file:" + dir + "?treshold=1":           `unknown parameter "treshold"`,
		"file:" + dir + "?threshold=big":        "use a positive number of bytes",
		"file:" + dir + "?threshold=0":          "use a positive number of bytes",
		"file:" + dir + "?threshold=16;prefix=": "the query does not parse",
		"file:" + dir + "?prefix=a&prefix=b":    `parameter "prefix" given 2 times`,
		"file:" + dir + "#blobs":                "unexpected #blobs",
		"file:" + dir + "?retention=-1h":        "use a duration of at least 1h",
		"file:" + dir + "?retention=1s":         "use a duration of at least 1h",
		"file:" + dir + "?prefix=a%20b":         "use letters, digits and - _ . / only",
		"file://var/lib/blobs":                  `host "var"`,
		"file:" + dir + "/missing":              "no blob directory",
		"s3:///prefix":                          "no bucket",
		"s3://bucket/?path_style=yes!":          "use true or false",
		"s3://AKIA:hunter2@bucket/p/":           "credentials in the URL",
		"s3://bucket/p/?endpoint=http%3A%2F%2FAKIA%3Ahunter2%40127.0.0.1%3A9000":             "credentials in the endpoint",
		"s3://bucket/p/?endpoint=localhost:9000":                                             "use the service's base URL",
		"s3://bucket/p/?endpoint=http%3A%2F%2FAKIA%3Ahunter2%40127.0.0.1%3A9000&regoin=x":    `unknown parameter "regoin"`,
		"s3://bucket/p/?endpoint=http%3A%2F%2FAKIA%3Ahunter2%40127.0.0.1%3A9000&threshold=0": "use a positive number of bytes",
		"file:": "no directory",
	} {
		_, err := openClaimCheck(t.Context(), url, false)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--claim-check") {
			t.Errorf("--claim-check %q: %v; want an error naming the flag and %q", url, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("--claim-check %q: the error shows the password: %v", url, err)
		}
	}
}
