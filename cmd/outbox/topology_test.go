package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox/internal/amqptest"
	"github.com/go-outbox/outbox/internal/kafkatest"
	"github.com/go-outbox/outbox/internal/natstest"
)

// The topology tests are not parallel: credentials in a --publisher URL are
// added to the command's list of secrets, which parallel tests read without
// a lock.

func wantLines(t *testing.T, args []string, out string, want ...string) {
	t.Helper()
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("outbox %s printed:\n%s\nwant:\n%s", strings.Join(args, " "), out, strings.Join(want, "\n"))
	}
}

func TestTopologyApplyDeclaresTheRabbitMQExchangeQueueAndDeadLetterQueueOnceThenFindsThem(t *testing.T) {
	url := amqptest.URL(t)
	name := "outbox-test-cli-topology-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() {
		ch, err := amqptest.Dial(t, url).Channel()
		if err != nil {
			t.Errorf("clean up: %v", err)
			return
		}
		_, _ = ch.QueueDelete(name, false, false, false)
		_, _ = ch.QueueDelete(name+".parked", false, false, false)
		_ = ch.ExchangeDelete(name+".events", false, false)
	})
	args := []string{"topology", "apply", "--publisher", url + "?exchange=" + name + ".events", "--queue", name, "--binding", "orders.*", "--dead-letter-queue", name + ".parked", "--single-active-consumer"}
	wantLines(t, args, mustCLI(t, args...),
		"exchange "+name+".events: created",
		"queue "+name+".parked: created",
		"queue "+name+": created",
		"binding "+name+" <- "+name+".events (orders.*): bound")
	wantLines(t, args, mustCLI(t, args...),
		"exchange "+name+".events: exists",
		"queue "+name+".parked: exists",
		"queue "+name+": exists",
		"binding "+name+" <- "+name+".events (orders.*): bound")

	ch, err := amqptest.Dial(t, url).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish(name+".events", "orders.created", true, false, amqp.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d messages; want the one published with routing key orders.created", name, q.Messages)
		}
		time.Sleep(10 * time.Millisecond)
	}

	code, _, stderr := cli(t, "topology", "apply", "--publisher", url+"?exchange="+name+".events", "--queue", name, "--binding", "orders.*")
	if code != 1 || !strings.Contains(stderr, "queue "+name) || !strings.Contains(stderr, "PRECONDITION_FAILED") || strings.Contains(stderr, "guest@") {
		t.Fatalf("topology apply without --single-active-consumer over the queue declared with it: exit %d, stderr %q; want exit 1 naming the queue and the broker's refusal, without the password", code, stderr)
	}
}

func TestTopologyApplyDeclaresTheNATSStreamAndDurableOnceThenFindsThem(t *testing.T) {
	srv := natstest.Start(t)
	args := []string{"topology", "apply", "--publisher", srv.URL() + "?stream=ORDERS&subject_prefix=orders.", "--durable", "billing", "--ack-wait", "45s"}
	wantLines(t, args, mustCLI(t, args...), "stream ORDERS: created", "consumer billing: created")
	wantLines(t, args, mustCLI(t, args...), "stream ORDERS: exists", "consumer billing: exists")
	cons, err := srv.JetStream(t).Consumer(t.Context(), "ORDERS", "billing")
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.Config.AckWait != 45*time.Second {
		t.Fatalf("consumer billing has AckWait %v; want the 45s of --ack-wait", info.Config.AckWait)
	}
	stream, err := srv.JetStream(t).Stream(t.Context(), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if subj := stream.CachedInfo().Config.Subjects; len(subj) != 1 || subj[0] != "orders.>" {
		t.Fatalf("stream ORDERS captures %v; want [orders.>] from ?subject_prefix=", subj)
	}
}

func TestTopologyApplyCreatesKafkaTopicsAndRefusesToFindFewerPartitionsThanAsked(t *testing.T) {
	c := kafkatest.StartFake(t) // topics of fixed names
	seeds := strings.Join(c.Seeds(), ",")
	args := []string{"topology", "apply", "--publisher", "kafka://" + seeds, "--topic", "orders", "--topic", "refunds", "--partitions", "3", "--config", "retention.ms=3600000"}
	wantLines(t, args, mustCLI(t, args...), "topic orders: created (3 partitions)", "topic refunds: created (3 partitions)")
	wantLines(t, args, mustCLI(t, args...), "topic orders: exists (3 partitions)", "topic refunds: exists (3 partitions)")
	code, _, stderr := cli(t, "topology", "apply", "--publisher", "kafka://"+seeds+"?topic=orders", "--partitions", "6")
	if code != 1 || !strings.Contains(stderr, "topic orders exists with 3 partitions, fewer than the 6 asked") {
		t.Fatalf("topology apply --partitions 6 over orders of 3: exit %d, stderr %q; want exit 1 saying the topic has fewer partitions", code, stderr)
	}
}

func TestTopologyApplyRefusesBadFlagsNamingTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--publisher is required"},
		{[]string{"--publisher", "https://example.com/hook"}, "amqp://"},
		{[]string{"--publisher", "nats://127.0.0.1:1?stream=S", "--queue", "billing"}, "--queue is for amqp:// brokers"},
		{[]string{"--publisher", "kafka://127.0.0.1:1", "--stream", "S", "--durable", "d"}, "--durable is for nats:// brokers; --stream is for nats:// brokers"},
		{[]string{"--publisher", "amqp://127.0.0.1:1/"}, "--queue is required"},
		{[]string{"--publisher", "amqp://127.0.0.1:1/", "--queue", "billing", "--binding", "orders"}, "--binding needs an exchange"},
		{[]string{"--publisher", "amqp://127.0.0.1:1/?exchange=x", "--queue", "billing", "--dead-letter-queue", "billing"}, "--dead-letter-queue billing"},
		{[]string{"--publisher", "nats://127.0.0.1:1"}, "--stream is required"},
		{[]string{"--publisher", "nats://127.0.0.1:1", "--stream", "A.B", "--subject", "a.>"}, "--stream"},
		{[]string{"--publisher", "nats://127.0.0.1:1?stream=S"}, "--subject is required"},
		{[]string{"--publisher", "nats://127.0.0.1:1?stream=S&subject_prefix=s.", "--ack-wait", "1m"}, "give --durable too"},
		{[]string{"--publisher", "kafka://127.0.0.1:1"}, "--topic is required"},
		{[]string{"--publisher", "kafka://127.0.0.1:1", "--topic", "a b"}, "--topic"},
		{[]string{"--publisher", "kafka://127.0.0.1:1", "--topic", "a", "--config", "retention.ms"}, "--config \"retention.ms\": use name=value"},
		{[]string{"--publisher", "kafka://127.0.0.1:1", "--topic", "a", "--partitions", "-1"}, "--partitions -1"},
	} {
		args := append([]string{"topology", "apply"}, tc.args...)
		code, _, stderr := cli(t, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("outbox %s: exit %d, stderr %q; want exit 2 (usage) with %q", strings.Join(args, " "), code, stderr, tc.want)
		}
	}
}
