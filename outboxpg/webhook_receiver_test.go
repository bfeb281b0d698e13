package outboxpg_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/internal/webhooktest"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/relaytest"
)

// The receiving end of a webhook on PostgreSQL: a relay posts messages to an
// outboxhttp.Handler that applies each once through an inbox. The first
// answer is lost after the commit (the connection is cut), one delivery
// fails in the handler, and a forged request comes in: at the end each
// message's effect exists once and the forged one none.
func TestWebhookHandlerAppliesEachMessageOnceThroughAnInbox(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	store, write := pgStore(t)
	schema, _, _ := strings.Cut(store.Name(), ".")
	inboxTable, err := outboxpg.NewInboxTable(pool, outboxpg.InboxOptions{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := inboxTable.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	effects := `"` + schema + `".effects`
	if _, err := pool.Exec(t.Context(), `CREATE TABLE `+effects+` (message_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	inbox, err := outbox.NewInbox(inboxTable, "billing")
	if err != nil {
		t.Fatal(err)
	}
	var applyCalls atomic.Int32
	apply := func(ctx context.Context, tx pgx.Tx, m outbox.Message) error {
		if applyCalls.Add(1) == 2 {
			return errors.New("ledger locked (injected)")
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` VALUES ($1)`, m.ID)
		return err
	}
	handler, err := outboxhttp.NewHandler(webhooktest.Secret, inbox.Apply(apply), outboxhttp.HandlerOptions{Logger: relaytest.TestLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	// The first delivery is applied and committed, then its answer is lost.
	var cut atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut.CompareAndSwap(false, true) {
			handler.ServeHTTP(httptest.NewRecorder(), r)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	msgs := []*outbox.Message{
		{Topic: "invoices", Payload: []byte(`{"n":1}`)},
		{Topic: "invoices", Payload: []byte(`{"n":2}`)},
		{Topic: "invoices", Payload: []byte(`{"n":3}`)},
	}
	if err := write(t.Context(), msgs...); err != nil {
		t.Fatal(err)
	}
	pub := webhooktest.NewPublisher(t, outboxhttp.Config{URL: srv.URL, Secret: webhooktest.Secret, Concurrency: 1})
	runRelay(t, store, pub)

	count := func(id uuid.UUID) (n int) {
		if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM `+effects+` WHERE message_id = $1`, id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := store.Stats(t.Context())
		if err == nil && st.Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outbox did not drain: %+v, %v", st, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range msgs {
		if n := count(m.ID); n != 1 {
			t.Errorf("message %s applied %d times, want once", m.ID, n)
		}
	}
	if !cut.Load() || applyCalls.Load() < 4 {
		t.Errorf("cut %v, %d applications tried: the lost answer and the failure did not happen as designed", cut.Load(), applyCalls.Load())
	}

	// A request signed with another secret is refused and applies nothing.
	forged := uuid.New()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"n":4}`))
	now := time.Now()
	req.Header.Set(outboxhttp.HeaderWebhookID, forged.String())
	req.Header.Set(outboxhttp.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(outboxhttp.HeaderWebhookSignature, outboxhttp.Sign([]byte("another secret, 16+ bytes"), forged.String(), now, []byte(`{"n":4}`)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || count(forged) != 0 {
		t.Fatalf("forged request: %d, applied %d times; want 401 and not applied", resp.StatusCode, count(forged))
	}
}
