package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxotel"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

// The inbox tables are what outboxotel's WatchInbox (and outboxprom's
// Config.Inbox) read, waiting messages included.
type inboxCounts interface {
	outboxotel.ParkedCounter
	WaitingCounts(ctx context.Context) (map[string]int64, error)
}

var (
	_ inboxCounts = (*outboxpg.InboxTable)(nil)
	_ inboxCounts = (*outboxsqlite.InboxTable)(nil)
)

// `outbox relay --metrics-addr` serves the relay's metrics in Prometheus
// text format under the documented names, /healthz, and /readyz once the
// relay reached the database.
func TestRelayServesMetricsHealthAndReadiness(t *testing.T) {
	t.Parallel()
	db := []string{"--database-url", pgtest.URL(t), "--schema", pgtest.Schema(t)}
	mustCLI(t, append([]string{"migrate", "up"}, db...)...)
	for range 3 {
		mustCLI(t, append([]string{"send", "--topic", "orders", "--payload", "{}"}, db...)...)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"relay", "--metrics-addr", addr, "--log-format", "json", "--poll-interval", "50ms"}, db...), &out, &errOut)
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()

	get := func(path string) (int, string) { return httpGet(addr, path) }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				stop()
				t.Fatalf("timed out waiting for %s; relay stderr:\n%s", what, errOut.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("/readyz to answer 200", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d %q, want 200", code, body)
	}
	published := regexp.MustCompile(`(?m)^outbox_messages_published_total\{[^}]*topic="orders"[^}]*\} 3$`)
	var metrics string
	waitFor("3 messages counted as published", func() bool {
		_, metrics = get("/metrics")
		return published.MatchString(metrics)
	})
	for _, name := range []string{
		"outbox_claim_duration_seconds_bucket{", "outbox_publish_duration_seconds_count{",
		"outbox_pending_messages{", "outbox_oldest_pending_age_seconds{", "outbox_dead_messages{",
		`table="` + db[3] + `.outbox"`,
	} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics lacks %s:\n%s", name, metrics)
		}
	}
	requireDocumentedMetricsExist(t, metrics)
	stop()
	if !strings.Contains(errOut.String(), `"msg":"outbox relay started"`) {
		t.Errorf("--log-format json: stderr is not JSON lines:\n%s", errOut.String())
	}
}

// freeAddr returns a loopback address with a port free a moment ago, for a
// server the test starts.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// httpGet returns the status and body of GET http://addr/path; status 0
// and the error when it got no answer.
func httpGet(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// eventOnlyMetrics appear in a scrape only once what they count happened
// (a retry, a dead letter, a store error, an inbox).
var eventOnlyMetrics = map[string]bool{
	"outbox_messages_retried_total": true, "outbox_messages_dead_total": true, "outbox_store_errors_total": true,
	"outbox_inbox_handled_total": true, "outbox_inbox_duplicates_total": true,
	"outbox_last_publish_age_seconds": true, // once a registered relay published and beat since
}

// consumerMetrics are exported by consumers, not by the relay: outboxprom's
// TestServeShowsAConsumersParkedMessagesHandledCountAndReadiness checks
// that they exist.
var consumerMetrics = regexp.MustCompile(`^outbox_(inbox|consumer)_`)

// requireDocumentedMetricsExist checks that every metric the Grafana
// dashboard and the alert rules in docs/observability use is one the relay
// exports, so a renamed metric cannot leave them silently empty.
func requireDocumentedMetricsExist(t *testing.T, scrape string) {
	t.Helper()
	name := regexp.MustCompile(`outbox_[a-z_]+`)
	for _, doc := range []string{"../../docs/observability/outbox-dashboard.json", "../../docs/observability/outbox-alerts.yml"} {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range name.FindAllString(string(text), -1) {
			n = strings.TrimSuffix(n, "_bucket")
			if !eventOnlyMetrics[n] && !consumerMetrics.MatchString(n) && !strings.Contains(scrape, "\n"+n) {
				t.Errorf("%s uses %s, which the relay does not export", doc, n)
			}
		}
	}
}
