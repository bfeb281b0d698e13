//go:build fault

package fault

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/google/uuid"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxpubsub"
)

// pubsubProject is the project of the suite's Pub/Sub topics and
// subscriptions, on the fake.
const pubsubProject = "outbox-fault"

// pubsubClientOptions point a Pub/Sub client at the fake at addr, without
// credentials or TLS.
func pubsubClientOptions(addr string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(addr), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
	}
}

// toPubSub makes the scenario's destination the topic "fault" on a fake
// Pub/Sub (pstest) in the test process, listening on the loopback
// interface so that consumer processes reach it too, with a subscription on
// it. It returns the fake's address, the subscription's full name and the
// publisher of the scenario's relay, closed when the test ends. The fake
// keeps every message published, acknowledged or not, so the check reads
// what arrived from it, duplicates included.
func (s *scenario) toPubSub() (addr, subscription string, pub *outboxpubsub.Publisher) {
	t := s.t
	srv := pstest.NewServer()
	t.Cleanup(func() { _ = srv.Close() })
	topic := "projects/" + pubsubProject + "/topics/fault"
	subscription = "projects/" + pubsubProject + "/subscriptions/fault-" + consumerName
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pubsub.NewClient(ctx, pubsubProject, pubsubClientOptions(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	// The least ack deadline Pub/Sub allows: what a killed process held
	// comes again about ten seconds after its last lease extension.
	if _, err := admin.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: subscription, Topic: topic, AckDeadlineSeconds: 10,
	}); err != nil {
		t.Fatalf("create subscription %s: %v", subscription, err)
	}
	pub, err = outboxpubsub.Open(ctx, "pubsub://"+pubsubProject+"/fault", outboxpubsub.Config{}, pubsubClientOptions(srv.Addr)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	published := func() []*pstest.Message {
		var ms []*pstest.Message
		for _, m := range srv.Messages() {
			if m.Topic == topic {
				ms = append(ms, m)
			}
		}
		slices.SortStableFunc(ms, func(a, b *pstest.Message) int { return a.PublishTime.Compare(b.PublishTime) })
		return ms
	}
	// No relay process: see TestFaultPubSubConsumerKilledTenTimes.
	s.publisher = ""
	s.arrived = func() int { return len(published()) }
	s.delivered = func() []uuid.UUID {
		t.Helper()
		var ids []uuid.UUID
		for _, m := range published() {
			id, err := uuid.Parse(m.Attributes[outboxpubsub.AttrID])
			if err != nil {
				t.Errorf("%s: Pub/Sub message %s has no outbox id: %v", s.name, m.ID, err)
				continue
			}
			ids = append(ids, id)
		}
		return ids
	}
	return srv.Addr, subscription, pub
}

// pubsubConsumerRole is the child role of a Pub/Sub consumer process:
// outboxpubsub.Consume on a subscription of the test process's fake, with
// an inbox on PostgreSQL, until SIGINT. It tells what it does on its
// standard output as natsConsumerRole does.
const pubsubConsumerRole = "pubsub-consumer"

// The environment of a Pub/Sub consumer process, besides TEST_DATABASE_URL
// and envSchema: the fake's address and the subscription's full name.
const (
	envPubSubAddr         = "OUTBOX_FAULT_PUBSUB_ADDR"
	envPubSubSubscription = "OUTBOX_FAULT_PUBSUB_SUBSCRIPTION"
)

func init() { childRoles[pubsubConsumerRole] = pubsubConsumerMain }

// pubsubConsumerMain is the main function of a Pub/Sub consumer process.
// Once armed by SIGUSR1 it may kill itself right after an inbox commit,
// before the handler returns (see consumerMain), so that the message is
// never acknowledged and Pub/Sub delivers it again once its ack deadline
// passes.
func pubsubConsumerMain() int {
	return consumerMain(pubsubConsumerRole, func(ctx context.Context, apply func(context.Context, outbox.Message) error) error {
		addr := os.Getenv(envPubSubAddr)
		if addr == "" {
			return errors.New(envPubSubAddr + " is not set")
		}
		opts := append(pubsubClientOptions(addr), option.WithGRPCDialOption(grpc.WithChainStreamInterceptor(shortStreamAckDeadline)))
		client, err := pubsub.NewClient(ctx, pubsubProject, opts...)
		if err != nil {
			return err
		}
		defer client.Close()
		return outboxpubsub.Consume(ctx, client, outboxpubsub.ConsumerConfig{
			Subscription: os.Getenv(envPubSubSubscription), Name: consumerName, Concurrency: consumerLanes,
			MaxDeliver: consumerMaxDeliver, BackoffMax: time.Second, Logger: consumerProcLog(),
		}, apply)
	})
}

// pubsubStreamAckDeadline is the ack deadline the consumer processes ask
// for when they open a stream: Pub/Sub's least.
const pubsubStreamAckDeadline = 10

// shortStreamAckDeadline is a gRPC stream interceptor that makes the
// client ask for pubsubStreamAckDeadline seconds when it opens a
// StreamingPull, instead of the 60 it asks for (Consume sets no
// MaxExtensionPeriod). That deadline holds a message from the moment the
// fake sends it until the client confirms receiving it (then the client's
// own extensions, of 10 s, take over): a message on its way to a process
// when it is killed would come again only after a minute, which is most of
// the run.
func shortStreamAckDeadline(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || !strings.HasSuffix(method, "/StreamingPull") {
		return cs, err
	}
	return shortDeadlineStream{cs}, nil
}

type shortDeadlineStream struct{ grpc.ClientStream }

func (s shortDeadlineStream) SendMsg(m any) error {
	if req, ok := m.(*pubsubpb.StreamingPullRequest); ok && req.StreamAckDeadlineSeconds > pubsubStreamAckDeadline {
		req = proto.Clone(req).(*pubsubpb.StreamingPullRequest)
		req.StreamAckDeadlineSeconds = pubsubStreamAckDeadline
		m = req
	}
	return s.ClientStream.SendMsg(m)
}

// TestFaultPubSubConsumerKilledTenTimes is TestFaultConsumerKilledTenTimes
// on Pub/Sub (pstest): two consumer processes (outboxpubsub.Consume with an
// inbox on PostgreSQL) killed ten times, five of them right after the
// inbox's commit and before the acknowledgement, while a relay publishes to
// a topic. What a killed process held and never acknowledged comes again
// once its ack deadline passes; every message must be applied once, and
// each one whose consumer died after the commit must come again and be
// skipped. The relay runs in the test process, as in
// TestFaultSQSConsumerKilledTenTimes: the faults here are the consumers',
// and `outbox relay` would reach the fake only through PUBSUB_EMULATOR_HOST
// in the test process's environment, which every child shares.
func TestFaultPubSubConsumerKilledTenTimes(t *testing.T) {
	const total, kills, procs = 5000, 10, 2
	s := newScenario(t, "consumer SIGKILL x10 (5 after commit), 5k msgs, Pub/Sub")
	addr, subscription, pub := s.toPubSub()
	// About 500 messages a second, as in TestFaultConsumerKilledTenTimes.
	s.writePause = 50 * time.Millisecond
	c := s.startConsumerProcs(pubsubConsumerRole, []string{envPubSubAddr + "=" + addr, envPubSubSubscription + "=" + subscription}, procs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	writeDone := make(chan error, 1)
	go func() { writeDone <- s.write(ctx, total, 3) }()
	// startSQSRelay runs any publisher in the test process.
	relay := s.startSQSRelay(pub)
	c.killAlternately(total, kills)
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	s.drain(2 * time.Minute)
	relay.stop()
	// Nothing happens to the relay: a message the fake stored twice would
	// be a duplicate that no fault explains.
	s.check(kills, 0)
}
