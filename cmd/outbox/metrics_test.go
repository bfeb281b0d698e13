package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox/internal/pgtest"
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

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

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
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
	stop()
	if !strings.Contains(errOut.String(), `"msg":"outbox relay started"`) {
		t.Errorf("--log-format json: stderr is not JSON lines:\n%s", errOut.String())
	}
}
