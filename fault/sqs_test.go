//go:build fault

package fault

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/awstest"
	"github.com/go-outbox/outbox/internal/clitest"
	"github.com/go-outbox/outbox/internal/pgtest"
	"github.com/go-outbox/outbox/outboxaws"
	"github.com/go-outbox/outbox/outboxpg"
)

// sqsVisibility is the SQS consumers' VisibilityTimeout: short, so that
// what a killed process received and never deleted is received again
// within the run, as JetStream's consumerAckWait redelivers.
const sqsVisibility = 2 * time.Second

// sqsConsumerConfig is the configuration of the suite's SQS consumer
// processes.
func sqsConsumerConfig(queue, park string, log *slog.Logger) outboxaws.ConsumerSQSConfig {
	return outboxaws.ConsumerSQSConfig{
		Queue: queue, ParkQueue: park, Name: consumerName, Concurrency: consumerLanes, MaxDeliver: consumerMaxDeliver,
		VisibilityTimeout: sqsVisibility, WaitTime: time.Second, BackoffMax: time.Second, Logger: log,
	}
}

// sqsRecorder is the publisher of an SQS scenario's relay: the SQS
// publisher, noting each message SQS confirmed. The consumers delete what
// they read, so nothing is left in the queue for the check to read as it
// reads a stream: what SQS confirmed, duplicates included, is what arrived.
// The relay sends through goaws with no fault and no SDK retry, so nothing
// arrives unconfirmed.
type sqsRecorder struct {
	pub *outboxaws.SQSPublisher

	mu  sync.Mutex
	ids []uuid.UUID // in the order of the confirmations
}

func (r *sqsRecorder) Publish(ctx context.Context, batch []outbox.Message) []error {
	errs := r.pub.Publish(ctx, batch)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range batch {
		if len(errs) == len(batch) && errs[i] == nil {
			r.ids = append(r.ids, m.ID)
		}
	}
	return errs
}

func (r *sqsRecorder) Close() error { return r.pub.Close() }

func (r *sqsRecorder) confirmed() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uuid.UUID(nil), r.ids...)
}

// toSQS makes the scenario's destination a fresh queue on srv, and returns
// its URL, the URL of a park queue beside it, and the publisher of
// startSQSRelay.
func (s *scenario) toSQS(srv *awstest.Server) (queue, park string, rec *sqsRecorder) {
	t := s.t
	// The queue's own visibility timeout, as the consumers': goaws hides a
	// message it gives out for the queue's (0 by default), and the consumer
	// endpoint hides it for the receive's only after goaws's reply, so
	// that with none a receive of the other process could take the message
	// in between: delivered twice with no fault.
	queue = srv.Queue(t, "fault-", map[string]string{"VisibilityTimeout": strconv.Itoa(int(sqsVisibility / time.Second))})
	park = srv.Queue(t, "fault-parked-", nil)
	// One attempt per request: the relay retries, knowing what it sent.
	client := sqs.New(srv.SQSClient().Options(), awstest.SQSProtocol, func(o *sqs.Options) { o.RetryMaxAttempts = 1 })
	pub, err := outboxaws.NewSQS(client, queue, outboxaws.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rec = &sqsRecorder{pub: pub}
	// No relay process can reach goaws: see startSQSRelay.
	s.publisher = ""
	s.arrived = func() int { return len(rec.confirmed()) }
	s.delivered = rec.confirmed
	return queue, park, rec
}

// sqsRelay is a relay in the test process publishing to SQS.
type sqsRelay struct {
	s    *scenario
	r    *outbox.Relay
	done chan error
	log  *clitest.LockedBuffer
}

// startSQSRelay runs a relay in the test process, on a pool of its own,
// with what the relay processes of the broker scenarios get (batches of 50,
// two workers, a 10s lease, retries capped at 1s, attempts out of reach):
// `outbox relay` cannot reach goaws, which speaks only the query protocol
// while the CLI's SQS client speaks AWS JSON.
func (s *scenario) startSQSRelay(pub outbox.Publisher) *sqsRelay {
	t := s.t
	cfg := pgtest.Config(t)
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := outboxpg.New(pool, outboxpg.Options{Schema: s.schema})
	if err != nil {
		t.Fatal(err)
	}
	rl := &sqsRelay{s: s, done: make(chan error, 1), log: &clitest.LockedBuffer{}}
	rl.r, err = outbox.NewRelay(store, pub, outbox.Config{
		BatchSize: 50, Workers: 2, LeaseDuration: 10 * time.Second, PollInterval: 100 * time.Millisecond,
		BackoffMax: time.Second, MaxAttempts: 10000,
		Logger: slog.New(slog.NewTextHandler(rl.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { rl.done <- rl.r.Run(ctx) }()
	// Registered after the pool's close: runs before it.
	t.Cleanup(func() {
		cancel()
		<-rl.done
		if out := rl.log.String(); t.Failed() && out != "" {
			t.Logf("%s: the relay's log, by message:\n%s", s.name, logSummary(out))
		}
	})
	return rl
}

// stop shuts the relay down and waits for its Run to return.
func (rl *sqsRelay) stop() {
	t := rl.s.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = rl.r.Shutdown(ctx)
	select {
	case err := <-rl.done:
		rl.done <- err // for the cleanup
		if err != nil {
			t.Errorf("%s: the relay's Run returned %v", rl.s.name, err)
		}
	case <-ctx.Done():
		t.Errorf("%s: the relay's Run did not return within 30s of Shutdown", rl.s.name)
	}
}

// sqsConsumerRole is the child role of an SQS consumer process:
// outboxaws.ConsumeSQS on a queue, through the test process's goaws, with
// an inbox on PostgreSQL, until SIGINT. It tells what it does on its
// standard output as natsConsumerRole does.
const sqsConsumerRole = "sqs-consumer"

// The environment of an SQS consumer process, besides TEST_DATABASE_URL and
// envSchema: the endpoint it reaches goaws through
// (awstest.Server.SQSConsumerEndpoint, which gives goaws the long polls and
// visibility timeouts a consumer needs), the queue's URL and its park
// queue's.
const (
	envSQSURL       = "OUTBOX_FAULT_SQS_URL"
	envSQSQueue     = "OUTBOX_FAULT_SQS_QUEUE"
	envSQSParkQueue = "OUTBOX_FAULT_SQS_PARK_QUEUE"
)

func init() { childRoles[sqsConsumerRole] = sqsConsumerMain }

// sqsConsumerMain is the main function of an SQS consumer process. Once
// armed by SIGUSR1 it may kill itself right after an inbox commit, before
// the handler returns (see consumerMain), so that the message is never
// deleted and SQS delivers it again once its visibility timeout passes.
func sqsConsumerMain() int {
	return consumerMain(sqsConsumerRole, func(ctx context.Context, apply func(context.Context, outbox.Message) error) error {
		endpoint := os.Getenv(envSQSURL)
		if endpoint == "" {
			return errors.New(envSQSURL + " is not set")
		}
		cc := sqsConsumerConfig(os.Getenv(envSQSQueue), os.Getenv(envSQSParkQueue), consumerProcLog())
		return outboxaws.ConsumeSQS(ctx, awstest.SQSClientAt(endpoint), cc, apply)
	})
}

// TestFaultSQSConsumerKilledTenTimes is TestFaultConsumerKilledTenTimes on
// SQS (goaws): two consumer processes (outboxaws.ConsumeSQS with an inbox
// on PostgreSQL) killed ten times, five of them right after the inbox's
// commit and before the DeleteMessage, while a relay publishes to a queue.
// What a killed process received and never deleted is received again once
// its visibility timeout passes; every message must be applied once, and
// each one whose consumer died after the commit must come again and be
// skipped.
func TestFaultSQSConsumerKilledTenTimes(t *testing.T) {
	const total, kills, procs = 5000, 10, 2
	srv := awstest.Start(t)
	s := newScenario(t, "consumer SIGKILL x10 (5 after commit), 5k msgs, SQS")
	queue, park, rec := s.toSQS(srv)
	// About 500 messages a second, as in TestFaultConsumerKilledTenTimes.
	s.writePause = 50 * time.Millisecond
	// One consumer endpoint on the loopback interface for both processes.
	c := s.startConsumerProcs(sqsConsumerRole, []string{
		envSQSURL + "=" + srv.SQSConsumerEndpoint(t), envSQSQueue + "=" + queue, envSQSParkQueue + "=" + park,
	}, procs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, total, 3) }()
	relay := s.startSQSRelay(rec)
	c.killAlternately(total, kills)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	relay.stop()
	// Nothing happens to the relay: a message SQS confirmed twice would be
	// a duplicate that no fault explains.
	s.check(kills, 0)
}
