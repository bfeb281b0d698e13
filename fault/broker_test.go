//go:build fault

package fault

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/natstest"
	"github.com/go-outbox/outbox/internal/proxytest"
	"github.com/go-outbox/outbox/outboxnats"
)

// brokerRelayFlags are given to every relay of the broker scenarios. Retries
// are capped at 1s so that the run drains within seconds of the broker's
// return. An unavailable broker costs no attempts (the restart scenarios
// check it), but a stalled link does: every batch behind it times out, and
// the attempt limit is for poison messages, so it is set out of reach.
var brokerRelayFlags = []string{"--backoff-max", "1s", "--max-attempts", "10000"}

// unavailableLog is what a relay worker logs when it finds the destination
// unavailable and pauses.
const unavailableLog = "destination unavailable"

// toRabbitMQ makes the scenario's relays publish to a fresh exchange whose
// durable queue keeps every message, across broker restarts too; the check
// reads the queue once the relays are stopped. It returns the exchange and
// queue.
func (s *scenario) toRabbitMQ(brokerURL string) amqptest.Destination {
	t := s.t
	d := amqptest.Declare(t, brokerURL)
	u, err := url.Parse(brokerURL)
	if err != nil {
		t.Fatalf("%s: %v", amqptest.EnvURL, err)
	}
	u.RawQuery = url.Values{"exchange": {d.Exchange}, "routing_key": {d.RoutingKey}}.Encode()
	s.publisher = u.String()
	queue := amqptest.WatchQueue(t, brokerURL, d.Queue)
	s.arrived = func() int {
		n, err := queue.Ready() // nothing consumes the queue before the check
		if err != nil {
			return -1
		}
		return n
	}
	s.delivered = func() []uuid.UUID {
		t.Helper()
		// The relays are stopped: the queue holds all there will be.
		var n int
		waitFor(t, time.Minute, "the queue's message count", func() bool {
			var err error
			n, err = queue.Ready()
			return err == nil
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := amqptest.Consume(t, brokerURL, d.Queue).Next(ctx, n)
		if err != nil {
			t.Fatalf("%s: read the queue: %v", s.name, err)
		}
		ids := make([]uuid.UUID, 0, n)
		for _, m := range got {
			id, err := uuid.Parse(m.MessageId)
			if err != nil {
				t.Errorf("%s: a message in the queue has message-id %q, not an outbox id", s.name, m.MessageId)
				continue
			}
			ids = append(ids, id)
		}
		return ids
	}
	return d
}

// toNATS makes the scenario's relays publish to a fresh JetStream stream on
// srv, stored in files so that it survives a restart of the server; the
// check reads the stream once the relays are stopped. The stream drops a
// message published again within its duplicate window (2 minutes), by its
// Nats-Msg-Id, so duplicates from the relays rarely show in the count. It
// returns the stream's name.
func (s *scenario) toNATS(srv *natstest.Server) string {
	t := s.t
	admin := srv.JetStream(t)
	stream, prefix := natstest.NewStream(t, admin, jetstream.StreamConfig{Storage: jetstream.FileStorage})
	s.publisher = srv.URL() + "?" + url.Values{"stream": {stream}, "subject_prefix": {prefix}}.Encode()
	stored := func() (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := admin.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return int(info.State.Msgs), nil
	}
	s.arrived = func() int {
		n, err := stored()
		if err != nil {
			return -1
		}
		return n
	}
	s.delivered = func() []uuid.UUID {
		t.Helper()
		n, err := stored()
		if err != nil {
			t.Fatalf("%s: stream %s: %v", s.name, stream, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := natstest.NewReader(admin, stream).Next(ctx, n)
		if err != nil {
			t.Fatalf("%s: read stream %s: %v", s.name, stream, err)
		}
		ids := make([]uuid.UUID, 0, n)
		for _, m := range got {
			raw := m.Headers().Get(outboxnats.HeaderMsgID)
			id, err := uuid.Parse(raw)
			if err != nil {
				t.Errorf("%s: a message in the stream has %s %q, not an outbox id", s.name, outboxnats.HeaderMsgID, raw)
				continue
			}
			ids = append(ids, id)
		}
		return ids
	}
	return stream
}

// brokerOutage runs writers and two relays publishing to the scenario's
// broker, calls stop once the relays are publishing, waits until the relays
// have failed batches against the stopped broker, calls start, and checks
// that the relays rode out the outage and nothing was lost, and that the
// scenario's consumer, running throughout, applied each message once.
func brokerOutage(t *testing.T, s *scenario, total int, stop, start func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, total, 4) }()
	// A lease of 10s gives a batch 9s for its confirms (the default lease is
	// 30s): nothing here needs a quick takeover, and on a busy machine a
	// broker can take more than the 2.7s of the suite's 3s lease to confirm
	// a batch it has stored (seen once just after a restart), which then
	// goes out again: a duplicate that no fault explains.
	flags := append([]string{"--lease", "10s"}, brokerRelayFlags...)
	relays := []*clitest.Relay{s.startRelay(s.url, flags...), s.startRelay(s.url, flags...)}
	waitFor(t, time.Minute, "relays to publish", func() bool { return s.arrived() >= total/10 })
	stop()
	// The outage lasts until the relays have felt it: their workers found
	// the broker unavailable and paused, each at least twice. Writers go
	// on meanwhile.
	waitFor(t, time.Minute, "relays pausing for the unavailable broker", func() bool {
		n := 0
		for _, r := range relays {
			n += r.Logged(unavailableLog)
		}
		return n >= 2*len(relays)*2
	})
	// Only the batches in flight when the broker went away may have counted
	// an attempt: claims during the outage count none, so an outage of any
	// length dead-letters nothing.
	if n, bound := s.failedAttempts(), len(relays)*2*50; n > bound {
		t.Errorf("%d messages counted a failed attempt during the outage; want at most %d (one batch per worker)", n, bound)
	}
	start()
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	stopRelays(t, relays, "the broker outage")
	// Each relay worker may have had a batch stored by the broker but not
	// confirmed when the broker closed the connection. (RabbitMQ stops
	// listening before it closes the connections, so a relay cannot lose a
	// second batch by reconnecting while it stops.)
	s.check(1, 2*2*50)
}

// TestFaultRabbitMQRestartedMidRun stops RabbitMQ (gracefully, as an
// operator or an orchestrator does) while relay processes publish to it, and
// starts it again on the same port with the same data.
func TestFaultRabbitMQRestartedMidRun(t *testing.T) {
	broker := amqptest.Restartable(t)
	s := newScenario(t, "RabbitMQ restart, 20k msgs, 2 relays, key order")
	s.ordered = true
	s.consumeRabbitMQ(broker.URL, s.toRabbitMQ(broker.URL))
	brokerOutage(t, s, 20000, func() { broker.Stop(t) }, func() { broker.Start(t) })
}

// TestFaultNATSRestartedMidRun stops the NATS server (JetStream, file store)
// while relay processes publish to it, and starts it again on the same port
// and store directory.
func TestFaultNATSRestartedMidRun(t *testing.T) {
	srv := natstest.Start(t)
	s := newScenario(t, "NATS restart, 10k msgs, 2 relays")
	s.consumeNATS(srv, s.toNATS(srv))
	brokerOutage(t, s, 10000, srv.Shutdown, func() {
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
	})
}

// stalledBrokerLink puts a TCP proxy that stops forwarding (without closing)
// between one relay and the scenario's broker: that relay's publishes get no
// answer, its batches time out before their leases end, and a second relay,
// on a direct link, publishes everything. The scenario's consumer, on a
// direct link too, consumes throughout. Asked to stop while the link still
// stalls, the first relay must exit within a bound: a publish or a close
// that waits for the broker without a deadline would keep it until the
// client library notices the dead connection by itself, if ever. The
// stalled relay's --publisher URL gets extraQuery (parameters for its
// client).
func stalledBrokerLink(t *testing.T, s *scenario, extraQuery string) {
	p := proxytest.ForURL(t, s.publisher)
	stalledURL := p.URL(s.publisher)
	if extraQuery != "" {
		sep := "?"
		if strings.Contains(stalledURL, "?") {
			sep = "&"
		}
		stalledURL += sep + extraQuery
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, 5000, 2) }()
	flags := append([]string{"--shutdown-timeout", "2s"}, brokerRelayFlags...)
	stalled := s.startRelayTo(s.url, stalledURL, flags...)
	waitFor(t, time.Minute, "the proxied relay to publish", func() bool { return s.arrived() > 1000 })
	p.Stall()
	// The taker gets a long lease for the reason given in brokerOutage.
	taker := s.startRelay(s.url, append([]string{"--lease", "10s"}, flags...)...)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	// Shutdown timeout 2s, then the publisher's close: RabbitMQ's
	// connection.close waits 5s for its answer, a NATS drain 5s.
	const exitBound = 20 * time.Second
	asked := time.Now()
	if !stalled.StopWithin(exitBound) {
		t.Errorf("%s: the relay behind the stalled link did not exit within %v of SIGINT", s.name, exitBound)
	} else {
		t.Logf("%s: the relay behind the stalled link exited %v after SIGINT; its log, by message:\n%s",
			s.name, time.Since(asked).Round(time.Millisecond), logSummary(stalled.Stderr()))
	}
	// What the stall held is dropped, as by a path that never recovers: a
	// late delivery of it could only add duplicates.
	p.Close()
	taker.Stop()
	// The stalled relay's batches in flight may be published twice.
	s.check(1, 2*50)
}

// logSummary counts the lines of a relay's log (slog text) by message.
func logSummary(log string) string {
	counts := map[string]int{}
	var order []string
	for line := range strings.Lines(log) {
		msg := line
		if _, rest, ok := strings.Cut(line, " msg="); ok {
			if q, err := strconv.QuotedPrefix(rest); err == nil {
				msg, _ = strconv.Unquote(q)
			} else {
				msg, _, _ = strings.Cut(rest, " ")
			}
		}
		msg = strings.TrimSpace(msg)
		if counts[msg] == 0 {
			order = append(order, msg)
		}
		counts[msg]++
	}
	if len(order) == 0 {
		return "        (nothing logged at warn level or above)\n"
	}
	var b strings.Builder
	for _, msg := range order {
		fmt.Fprintf(&b, "%6d  %s\n", counts[msg], msg)
	}
	return b.String()
}

// TestFaultStalledRabbitMQLink stalls the link between a relay and
// RabbitMQ.
func TestFaultStalledRabbitMQLink(t *testing.T) {
	brokerURL := amqptest.URL(t)
	s := newScenario(t, "stalled relay-RabbitMQ link, 5k msgs")
	s.consumeRabbitMQ(brokerURL, s.toRabbitMQ(brokerURL))
	// Heartbeats every 60s, RabbitMQ's default: amqp091 gives up on a silent
	// connection after three of them, so only the publisher's own deadlines
	// can end a stalled publish in time.
	stalledBrokerLink(t, s, "heartbeat=60")
}

// TestFaultStalledNATSLink stalls the link between a relay and NATS.
func TestFaultStalledNATSLink(t *testing.T) {
	s := newScenario(t, "stalled relay-NATS link, 5k msgs, key order")
	s.ordered = true
	srv := natstest.Start(t)
	s.consumeNATS(srv, s.toNATS(srv))
	stalledBrokerLink(t, s, "")
}
