package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxamqp"
	"github.com/go-outbox/outbox/outboxkafka"
	"github.com/go-outbox/outbox/outboxnats"
)

// topologyFlags are the flags of topology apply, by broker.
type topologyFlags struct {
	publisherURL string
	timeout      time.Duration

	queue outboxamqp.Queue

	stream  outboxnats.Stream
	durable outboxnats.ConsumerConfig

	topics            []string
	partitions        int32
	replicationFactor int16
	configs           []string
}

// topologyBrokerFlags names the broker each broker-specific flag is for, so
// that a flag given to another broker is refused rather than ignored.
var topologyBrokerFlags = map[string]string{
	"exchange": "amqp", "exchange-type": "amqp", "queue": "amqp", "binding": "amqp", "classic": "amqp",
	"single-active-consumer": "amqp", "dead-letter-exchange": "amqp", "dead-letter-queue": "amqp", "dead-letter-routing-key": "amqp",
	"stream": "nats", "subject": "nats", "replicas": "nats", "max-age": "nats", "duplicates": "nats",
	"durable": "nats", "filter-subject": "nats", "ack-wait": "nats",
	"topic": "kafka", "partitions": "kafka", "replication-factor": "kafka", "config": "kafka",
}

func newTopologyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topology",
		Short: "Declare the exchanges, queues, streams and topics the relay and consumers need",
	}
	cmd.AddCommand(newTopologyApplyCommand())
	return cmd
}

func newTopologyApplyCommand() *cobra.Command {
	var f topologyFlags
	cmd := &cobra.Command{
		Use:   "apply",
		Short: "Declare the broker objects the flags describe; what exists is left as it is",
		Long: `apply declares, on the broker of --publisher (the URL the relay takes), what the
relay publishes to and what consumers read, and prints each object with
"created", "exists", "updated" or "bound". Running it again changes nothing.

  amqp://...  --queue Q [--exchange X] [--binding KEY ...] [--single-active-consumer]
              [--dead-letter-queue DLQ [--dead-letter-exchange DLX]]
              the exchange (durable topic when missing; default ?exchange=), a quorum
              queue bound to it, and the dead-letter exchange and queue
  nats://...  --stream S --subject SUBJ ... [--durable D [--filter-subject F]]
              the stream (default ?stream=, subjects default ?subject_prefix= + ">")
              and the durable consumer outboxnats.Consume reads
  kafka://... --topic T ... [--partitions N]
              the topics (default ?topic=); one with fewer partitions than asked is
              reported, not grown (that would move keys to other partitions)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
			defer cancel()
			return f.apply(ctx, cmd, cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.publisherURL, "publisher", "", "the broker: amqp://user:pass@host:5672/vhost?exchange=x, nats://host:4222?stream=s, kafka://host:9092 (as the relay's --publisher)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")

	fl.StringVar(&f.queue.Exchange, "exchange", "", "amqp: exchange to bind the queue to, declared if missing (default ?exchange= of --publisher)")
	fl.StringVar(&f.queue.ExchangeType, "exchange-type", "", "amqp: type of the exchanges declared (default topic; an existing exchange is then used whatever its type)")
	fl.StringVar(&f.queue.Name, "queue", "", "amqp: queue to declare (durable, quorum)")
	fl.StringArrayVar(&f.queue.Bindings, "binding", nil, "amqp: routing key binding the queue to the exchange, e.g. 'orders.*' (repeat for more)")
	fl.BoolVar(&f.queue.Classic, "classic", false, "amqp: classic queues instead of quorum queues")
	fl.BoolVar(&f.queue.SingleActiveConsumer, "single-active-consumer", false, "amqp: one consumer process at a time, so key order holds across processes")
	fl.StringVar(&f.queue.DeadLetterExchange, "dead-letter-exchange", "", "amqp: exchange that receives the messages consumers park (declared if missing)")
	fl.StringVar(&f.queue.DeadLetterQueue, "dead-letter-queue", "", "amqp: queue that keeps the parked messages")
	fl.StringVar(&f.queue.DeadLetterRoutingKey, "dead-letter-routing-key", "", "amqp: routing key of parked messages (default the dead-letter queue's name)")

	fl.StringVar(&f.stream.Name, "stream", "", "nats: stream to declare (default ?stream= of --publisher)")
	fl.StringArrayVar(&f.stream.Subjects, "subject", nil, "nats: subject the stream captures, e.g. 'orders.>' (repeat for more; default ?subject_prefix= + '>')")
	fl.IntVar(&f.stream.Replicas, "replicas", 0, "nats: servers keeping the stream (default 1)")
	fl.DurationVar(&f.stream.MaxAge, "max-age", 0, "nats: how long the stream keeps a message (default no limit)")
	fl.DurationVar(&f.stream.Duplicates, "duplicates", 0, "nats: window in which a message id seen before is dropped (default the server's, 2m)")
	fl.StringVar(&f.durable.Durable, "durable", "", "nats: durable consumer to declare, as outboxnats.ConsumerConfig.Durable")
	fl.StringVar(&f.durable.FilterSubject, "filter-subject", "", "nats: subjects the durable reads (default all of the stream)")
	fl.DurationVar(&f.durable.AckWait, "ack-wait", 0, "nats: the durable's AckWait, as given to Consume (default 30s)")

	fl.StringArrayVar(&f.topics, "topic", nil, "kafka: topic to declare (repeat for more; default ?topic= of --publisher)")
	fl.Int32Var(&f.partitions, "partitions", 0, "kafka: partitions of a created topic, the most consumers that share its keys (default the broker's)")
	fl.Int16Var(&f.replicationFactor, "replication-factor", 0, "kafka: copies of each partition (default the broker's)")
	fl.StringArrayVar(&f.configs, "config", nil, "kafka: topic config of a created topic, name=value, e.g. retention.ms=604800000 (repeat for more)")
	return cmd
}

// apply checks the flags against the broker of --publisher, declares, and
// prints what it did.
func (f *topologyFlags) apply(ctx context.Context, cmd *cobra.Command, out io.Writer) error {
	if f.publisherURL == "" {
		return usagef("--publisher is required: the broker URL the relay publishes to")
	}
	rememberSecret(f.publisherURL)
	scheme, _, _ := strings.Cut(f.publisherURL, ":")
	broker := map[string]string{"amqp": "amqp", "amqps": "amqp", "nats": "nats", "tls": "nats", "kafka": "kafka"}[strings.ToLower(scheme)]
	if broker == "" {
		return usagef("--publisher %q: topology apply declares on amqp://, amqps://, nats://, tls:// (NATS) or kafka:// brokers", redact(f.publisherURL))
	}
	var wrong []string
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if b := topologyBrokerFlags[fl.Name]; b != "" && b != broker {
			wrong = append(wrong, fmt.Sprintf("--%s is for %s:// brokers", fl.Name, b))
		}
	})
	if len(wrong) > 0 {
		slices.Sort(wrong)
		return usagef("%s, and --publisher is a %s:// URL", strings.Join(wrong, "; "), broker)
	}
	if f.timeout <= 0 {
		return usagef("--timeout %v: use a positive duration", f.timeout)
	}
	switch broker {
	case "amqp":
		return f.applyAMQP(ctx, out)
	case "nats":
		return f.applyNATS(ctx, out)
	default:
		return f.applyKafka(ctx, out)
	}
}

func (f *topologyFlags) applyAMQP(ctx context.Context, out io.Writer) error {
	target, err := parseAMQPURL(f.publisherURL)
	if err != nil {
		return usagef("--publisher %q: %v", redact(f.publisherURL), err)
	}
	if f.queue.Name == "" {
		return usagef("--queue is required with an amqp:// --publisher: name the queue consumers read")
	}
	if f.queue.Exchange == "" {
		f.queue.Exchange = target.cfg.Exchange
	}
	if f.queue.Exchange == "" && len(f.queue.Bindings) > 0 {
		return usagef("--binding needs an exchange: give --exchange, or ?exchange= in --publisher (the default exchange takes no bindings)")
	}
	done, err := outboxamqp.Declare(ctx, target.url, f.queue)
	for _, d := range done {
		fmt.Fprintf(out, "%s %s: %s\n", d.Kind, d.Name, d.Action)
	}
	return topologyError(err, map[string]string{
		"outboxamqp.Queue.Name": "--queue", "outboxamqp.Queue.Exchange": "--exchange",
		"outboxamqp.Queue.DeadLetterQueue": "--dead-letter-queue", "outboxamqp.Queue.DeadLetterRoutingKey": "--dead-letter-routing-key",
	})
}

func (f *topologyFlags) applyNATS(ctx context.Context, out io.Writer) error {
	n, err := parseNATSURL(f.publisherURL)
	secrets.add(n.password, n.token)
	if err != nil {
		return usagef("--publisher %q: %v", redactNATSURL(f.publisherURL), err)
	}
	if f.stream.Name == "" {
		f.stream.Name = n.stream
	}
	if f.stream.Name == "" {
		return usagef("--stream is required with a nats:// --publisher without ?stream=: name the stream the relay publishes to")
	}
	if len(f.stream.Subjects) == 0 && n.subjectPrefix != "" {
		f.stream.Subjects = []string{n.subjectPrefix + ">"}
	}
	if len(f.stream.Subjects) == 0 {
		return usagef("--subject is required with a nats:// --publisher without ?subject_prefix=: give the subjects the relay publishes to, e.g. --subject 'orders.>'")
	}
	if f.durable.Durable == "" && (f.durable.FilterSubject != "" || f.durable.AckWait != 0) {
		return usagef("--filter-subject and --ack-wait describe a durable consumer: give --durable too")
	}
	streamFlags := map[string]string{"outboxnats.Stream.Name": "--stream", "outboxnats.Stream.Subjects": "--subject", "outboxnats.Stream": "--replicas, --max-age and --duplicates"}
	if err := f.stream.Validate(); err != nil {
		return topologyError(err, streamFlags)
	}
	opts := append(n.options(), nats.Name("outbox topology"), nats.Timeout(min(f.timeout, 10*time.Second)))
	nc, err := nats.Connect(strings.Join(n.servers, ","), opts...)
	if err != nil {
		return fmt.Errorf("NATS at %s: %w", redactNATSURL(f.publisherURL), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	d, err := outboxnats.DeclareStream(ctx, js, f.stream)
	if err != nil {
		return topologyError(err, streamFlags)
	}
	fmt.Fprintf(out, "%s %s: %s\n", d.Kind, d.Name, d.Action)
	if f.durable.Durable == "" {
		return nil
	}
	f.durable.Stream = f.stream.Name
	d, err = outboxnats.DeclareConsumer(ctx, js, f.durable)
	if err != nil {
		return topologyError(err, map[string]string{"outboxnats.ConsumerConfig.Durable": "--durable", "outboxnats.ConsumerConfig": "--ack-wait"})
	}
	fmt.Fprintf(out, "%s %s: %s\n", d.Kind, d.Name, d.Action)
	return nil
}

func (f *topologyFlags) applyKafka(ctx context.Context, out io.Writer) error {
	k, err := parseKafkaURL(f.publisherURL)
	if err != nil {
		return usagef("--publisher %q: %v", redactKafkaURL(f.publisherURL), err)
	}
	if len(f.topics) == 0 && k.topic != "" {
		f.topics = []string{k.topic}
	}
	if len(f.topics) == 0 {
		return usagef("--topic is required with a kafka:// --publisher without ?topic=: name the topics the relay publishes to")
	}
	configs := map[string]string{}
	for _, c := range f.configs {
		name, value, ok := strings.Cut(c, "=")
		if !ok || name == "" {
			return usagef("--config %q: use name=value, e.g. retention.ms=604800000", c)
		}
		configs[name] = value
	}
	topics := make([]outboxkafka.Topic, 0, len(f.topics))
	for _, name := range f.topics {
		topics = append(topics, outboxkafka.Topic{Name: name, Partitions: f.partitions, ReplicationFactor: f.replicationFactor, Configs: configs})
	}
	done, err := outboxkafka.DeclareTopics(ctx, k.seeds, topics, k.options()...)
	for _, d := range done {
		fmt.Fprintf(out, "topic %s: %s (%d partitions)\n", d.Name, d.Action, d.Partitions)
	}
	return topologyError(err, map[string]string{
		"outboxkafka.Topic.Name": "--topic", "outboxkafka.Topic.Partitions": "--partitions", "outboxkafka.Topic.ReplicationFactor": "--replication-factor",
	})
}

// topologyError turns a helper's *outbox.ConfigError into a usage error that
// names the flag the user typed (flags maps its Field to them).
func topologyError(err error, flags map[string]string) error {
	var ce *outbox.ConfigError
	if !errors.As(err, &ce) || flags[ce.Field] == "" {
		return err
	}
	return usagef("%s %v: %s", flags[ce.Field], ce.Value, ce.Fix)
}
