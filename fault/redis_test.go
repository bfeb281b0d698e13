//go:build fault

package fault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/redistest"
	"github.com/go-outbox/outbox/outboxredis"
)

// redisClaimAfter is the Redis consumer's ClaimAfter: short, so that an
// entry the group gave out while its reply was lost at the kill (pending,
// never handed to the lanes) is taken over within the run, as JetStream's
// consumerAckWait redelivers.
const redisClaimAfter = 5 * time.Second

// toRedis makes the scenario's relays publish to one stream on srv, a
// private server; the check reads the stream once the relays are stopped.
// Redis has no deduplication: every duplicate the relays cause is in the
// stream, and counted. It returns the stream's name and a client of srv,
// closed when the test ends.
func (s *scenario) toRedis(srv *redistest.Server) (string, *redis.Client) {
	t := s.t
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	stream := "fault." + hex.EncodeToString(b)
	s.publisher = strings.TrimSuffix(srv.URL, "/0") + "/" + stream
	s.arrived = func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := c.XLen(ctx, stream).Result()
		if err != nil {
			return -1
		}
		return int(n)
	}
	s.delivered = func() []uuid.UUID {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var ids []uuid.UUID
		after := "-"
		for {
			xs, err := c.XRangeN(ctx, stream, after, "+", 1000).Result()
			if err != nil {
				t.Fatalf("%s: read stream %s: %v", s.name, stream, err)
			}
			if len(xs) == 0 {
				return ids
			}
			for _, x := range xs {
				after = "(" + x.ID
				m, err := outboxredis.FromEntry(stream, x)
				if err != nil {
					t.Errorf("%s: entry %s: %v", s.name, x.ID, err)
					continue
				}
				ids = append(ids, m.ID)
			}
		}
	}
	return stream, c
}

// consumeRedis consumes stream with outboxredis.Consume (a consumer group,
// beside the check's XRANGE) on a client of its own while the scenario
// runs.
func (s *scenario) consumeRedis(srv *redistest.Server, stream string) {
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		s.t.Fatal(err)
	}
	client := redis.NewClient(opts)
	s.t.Cleanup(func() { _ = client.Close() })
	c := s.newConsumer("outboxredis")
	c.run(func(ctx context.Context, handle func(context.Context, outbox.Message) error) error {
		return outboxredis.Consume(ctx, client, outboxredis.ConsumerConfig{
			Stream: stream, Group: consumerName, Consumer: consumerName + "-1", Concurrency: consumerLanes,
			MaxDeliver: consumerMaxDeliver, ClaimAfter: redisClaimAfter, BackoffMax: time.Second, Logger: c.logger,
		}, handle)
	})
}

// TestFaultRedisRestartedMidRunLosesNothingItConfirmed kills the Redis
// server (SIGKILL) while relay processes publish to it and a consumer reads
// it, and starts it again on the same port with its append-only file. The
// server fsyncs every write before it replies (appendfsync always), and the
// publisher counts a message published only once Redis replied, so every
// committed message is in the stream after the restart: none lost, the
// batches whose replies the kill cut off appended again (duplicates, within
// bound), and the consumer's inbox applies each message once.
func TestFaultRedisRestartedMidRunLosesNothingItConfirmed(t *testing.T) {
	srv := redistest.StartDurable(t)
	s := newScenario(t, "Redis SIGKILL+restart (appendfsync always), 10k msgs, 2 relays")
	stream, _ := s.toRedis(srv)
	s.consumeRedis(srv, stream)
	var confirmed int
	var killed time.Time
	brokerOutage(t, s, 10000, func() {
		// The entries Redis said it held just before the kill: the
		// restarted server must hold them all.
		confirmed = s.arrived()
		srv.Stop()
		killed = time.Now()
	}, func() {
		srv.Restart(t)
		if n := s.arrived(); n < confirmed {
			t.Errorf("%s: the stream held %d entries before the kill and %d after the restart: Redis lost entries it had confirmed", s.name, confirmed, n)
		}
		t.Logf("%s: killed with %d entries in the stream, back after %v", s.name, confirmed, time.Since(killed).Round(time.Millisecond))
	})
}

// redisConsumerRole is the child role of a Redis consumer process:
// outboxredis.Consume on a stream, under a consumer name of its own (the
// host and process id), with an inbox on PostgreSQL, until SIGINT. It
// tells what it does on its standard output as natsConsumerRole does.
const redisConsumerRole = "redis-consumer"

// envRedisURL is the Redis server of a consumer process; envStream and
// envSchema give the stream and the inbox's schema.
const envRedisURL = "OUTBOX_FAULT_REDIS_URL"

func init() { childRoles[redisConsumerRole] = redisConsumerMain }

// redisConsumerMain is the main function of a Redis consumer process. Once
// armed by SIGUSR1 it may kill itself right after an inbox commit, before
// the handler returns (see consumerMain), so that the entry stays pending
// for the dead consumer until another process of the group takes it over
// (XAUTOCLAIM after ClaimAfter).
func redisConsumerMain() int {
	return consumerMain(redisConsumerRole, func(ctx context.Context, apply func(context.Context, outbox.Message) error) error {
		opts, err := redis.ParseURL(os.Getenv(envRedisURL))
		if err != nil {
			return err
		}
		client := redis.NewClient(opts)
		defer client.Close()
		return outboxredis.Consume(ctx, client, outboxredis.ConsumerConfig{
			Stream: os.Getenv(envStream), Group: consumerName, Concurrency: consumerLanes,
			MaxDeliver: consumerMaxDeliver, ClaimAfter: redisClaimAfter, BackoffMax: time.Second, Logger: consumerProcLog(),
		}, apply)
	})
}

// TestFaultRedisConsumerKilledTenTimes is TestFaultConsumerKilledTenTimes
// on Redis: two consumer processes of one group (outboxredis.Consume with
// an inbox on PostgreSQL) killed ten times, five of them right after the
// inbox's commit and before the XACK, while a relay publishes to a stream.
// A killed process's pending entries are taken over by the other (after
// ClaimAfter); every message must be applied once, and each one whose
// consumer died after the commit must come again and be skipped.
func TestFaultRedisConsumerKilledTenTimes(t *testing.T) {
	const total, kills, procs = 5000, 10, 2
	srv := redistest.Start(t)
	s := newScenario(t, "consumer SIGKILL x10 (5 after commit), 5k msgs, Redis")
	stream, _ := s.toRedis(srv)
	// About 500 messages a second, as in TestFaultConsumerKilledTenTimes.
	s.writePause = 50 * time.Millisecond
	c := s.startConsumerProcs(redisConsumerRole, []string{envRedisURL + "=" + srv.URL, envStream + "=" + stream}, procs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, total, 3) }()
	relay := s.startRelay(s.url, append([]string{"--lease", "10s"}, brokerRelayFlags...)...)
	c.killAlternately(total, kills)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	relay.Stop()
	// Nothing happens to the relay: a duplicate in the stream would be one
	// that no fault explains.
	s.check(kills, 0)
}
