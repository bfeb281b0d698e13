package outboxkafka

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/go-outbox/outbox"
)

// ErrFewerPartitions means a topic DeclareTopics was asked for exists with
// fewer partitions than Topic.Partitions. DeclareTopics leaves it as it is:
// adding partitions moves keys to other partitions, so the messages of a key
// written before and after the change could be read out of order.
var ErrFewerPartitions = errors.New("topic exists with fewer partitions than asked")

// What DeclareTopics did with a topic, in Declared.Action.
const (
	// ActionCreated: the topic did not exist and was created.
	ActionCreated = "created"
	// ActionExists: the topic existed, with at least the partitions asked
	// for; it was left as it is.
	ActionExists = "exists"
)

// Topic describes a Kafka topic for DeclareTopics.
type Topic struct {
	// Configs are topic configurations given at creation, such as
	// "retention.ms" or "min.insync.replicas". A topic that exists keeps its
	// own: DeclareTopics does not change them.
	Configs map[string]string
	// Name is the topic: a message's topic with the publisher's default
	// routing, or Config.Topic.
	Name string
	// Partitions is how many partitions the topic gets. Messages of one key
	// go to one partition, where Kafka keeps their order, so choose enough
	// for the consumers you will run at once: adding partitions later moves
	// keys. 0: the broker's num.partitions.
	Partitions int32
	// ReplicationFactor is how many brokers keep a copy of each partition.
	// 0: the broker's default.replication.factor.
	ReplicationFactor int16
}

func (t Topic) validate() error {
	switch {
	case ValidateTopic(t.Name) != nil:
		return &outbox.ConfigError{Field: "outboxkafka.Topic.Name", Value: fmt.Sprintf("%q", t.Name), Fix: ValidateTopic(t.Name).Error()}
	case t.Partitions < 0:
		return &outbox.ConfigError{Field: "outboxkafka.Topic.Partitions", Value: t.Partitions, Fix: "use a positive count, or 0 for the broker's default"}
	case t.ReplicationFactor < 0:
		return &outbox.ConfigError{Field: "outboxkafka.Topic.ReplicationFactor", Value: t.ReplicationFactor, Fix: "use a positive count, or 0 for the broker's default"}
	}
	return nil
}

// Declared is what DeclareTopics did with one topic.
type Declared struct {
	// Action is ActionCreated or ActionExists.
	Action string
	// Name is the topic.
	Name string
	// Partitions is the topic's partition count now.
	Partitions int
}

// DeclareTopics creates the topics that do not exist on the cluster at seeds
// (opts add TLS, SASL...: the options given to Open), on a client of its own
// that it closes before returning. Declaring is idempotent: a topic that
// exists is left as it is, configurations included, and reported as
// ActionExists when it has at least the partitions asked for. One with fewer
// is not changed either: its error matches ErrFewerPartitions and says how to
// add partitions once you accept that keys move. Every topic is tried; the
// error joins the failures, and Declared lists the topics that succeeded,
// in the order given.
func DeclareTopics(ctx context.Context, seeds []string, topics []Topic, opts ...kgo.Opt) ([]Declared, error) {
	if len(seeds) == 0 {
		return nil, &outbox.ConfigError{Field: "outboxkafka.DeclareTopics seeds", Value: "[]", Fix: "give at least one broker address, host:port"}
	}
	names := make([]string, 0, len(topics))
	for _, t := range topics {
		if err := t.validate(); err != nil {
			return nil, err
		}
		if slices.Contains(names, t.Name) {
			return nil, &outbox.ConfigError{Field: "outboxkafka.Topic.Name", Value: t.Name, Fix: "declare each topic once"}
		}
		names = append(names, t.Name)
	}
	client, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: declare topics: %w", err)
	}
	defer client.Close()
	admin := kadm.NewClient(client)
	existing, err := admin.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("outboxkafka: declare topics: list topics: %w", err)
	}
	var (
		declared []Declared
		errs     []error
	)
	for _, t := range topics {
		d, err := declareTopic(ctx, admin, t, existing[t.Name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		declared = append(declared, d)
	}
	return declared, errors.Join(errs...)
}

// declareTopic creates t, or checks the topic that exists (detail, from a
// metadata request, has an error if it does not).
func declareTopic(ctx context.Context, admin *kadm.Client, t Topic, detail kadm.TopicDetail) (Declared, error) {
	if detail.Err == nil && detail.Topic != "" {
		return checkTopic(t, len(detail.Partitions))
	}
	if detail.Err != nil && !errors.Is(detail.Err, kerr.UnknownTopicOrPartition) {
		return Declared{}, fmt.Errorf("outboxkafka: declare topic %s: look it up: %w", t.Name, detail.Err)
	}
	partitions, replicas := t.Partitions, t.ReplicationFactor
	if partitions == 0 {
		partitions = -1 // the broker's default (Kafka 2.4+)
	}
	if replicas == 0 {
		replicas = -1
	}
	var configs map[string]*string
	if len(t.Configs) > 0 {
		configs = make(map[string]*string, len(t.Configs))
		for k, v := range t.Configs {
			configs[k] = kadm.StringPtr(v)
		}
	}
	resp, err := admin.CreateTopic(ctx, partitions, replicas, configs, t.Name)
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		// Created by someone else since the look-up: check it as found.
		details, lerr := admin.ListTopics(ctx, t.Name)
		if lerr != nil || details[t.Name].Err != nil {
			return Declared{}, fmt.Errorf("outboxkafka: declare topic %s: it was created meanwhile, and looking it up failed: %w", t.Name, errors.Join(lerr, details[t.Name].Err))
		}
		return checkTopic(t, len(details[t.Name].Partitions))
	case err != nil:
		msg := ""
		if resp.ErrMessage != "" {
			msg = " (" + resp.ErrMessage + ")"
		}
		return Declared{}, fmt.Errorf("outboxkafka: create topic %s with %d partitions and replication factor %d%s: %w", t.Name, t.Partitions, t.ReplicationFactor, msg, err)
	}
	return Declared{Action: ActionCreated, Name: t.Name, Partitions: int(resp.NumPartitions)}, nil
}

func checkTopic(t Topic, partitions int) (Declared, error) {
	if int(t.Partitions) > partitions {
		return Declared{}, fmt.Errorf("outboxkafka: topic %s exists with %d partitions, fewer than the %d asked, and is left so: "+
			"adding partitions sends some keys to new partitions, so a key's messages written before and after could be read out of order; "+
			"ask for %d, or add them (kafka-topics.sh --alter --topic %s --partitions %d) once the topic is drained or that is acceptable: %w",
			t.Name, partitions, t.Partitions, partitions, t.Name, t.Partitions, ErrFewerPartitions)
	}
	return Declared{Action: ActionExists, Name: t.Name, Partitions: partitions}, nil
}
