package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
)

// What DeclareStream and DeclareConsumer did, in Declared.Action.
const (
	// ActionCreated: the stream or consumer did not exist and was created.
	ActionCreated = "created"
	// ActionExists: it existed as asked and was left as it is.
	ActionExists = "exists"
	// ActionUpdated: it existed, and the settings asked for were changed
	// in place (the others were kept).
	ActionUpdated = "updated"
)

// Declared is what DeclareStream or DeclareConsumer did.
type Declared struct {
	// Action is ActionCreated, ActionExists or ActionUpdated.
	Action string
	// Kind is "stream" or "consumer".
	Kind string
	// Name is the stream's or the durable consumer's name.
	Name string
}

// Stream describes a JetStream stream for DeclareStream: file storage,
// limits retention (messages stay until MaxAge or the server's limits, read
// or not, so a durable created later still reads them from the first).
type Stream struct {
	// Duplicates is the window in which JetStream drops a message whose
	// Nats-Msg-Id (the outbox id) it already stored: make it longer than
	// the outages whose duplicates you want dropped (see the package
	// documentation). 0: the server's default, two minutes.
	Duplicates time.Duration
	// MaxAge is how long the stream keeps a message. 0: no limit.
	MaxAge time.Duration
	// Name is the stream, the publisher's Config.Stream and
	// ConsumerConfig.Stream.
	Name string
	// Replicas is how many servers of a cluster keep the stream. 0: 1.
	Replicas int
	// Subjects are the subjects the stream captures: those the publisher
	// sends to (Config.SubjectPrefix + topic), e.g. "orders.>".
	Subjects []string
}

// Validate reports what DeclareStream would refuse in s before asking the
// server, as a *outbox.ConfigError naming the field.
func (s Stream) Validate() error {
	if err := (Config{Stream: s.Name}).Validate(); err != nil || s.Name == "" {
		return &outbox.ConfigError{Field: "outboxnats.Stream.Name", Value: fmt.Sprintf("%q", s.Name), Fix: "name the stream, without spaces, dots, wildcards or path separators"}
	}
	switch {
	case len(s.Subjects) == 0:
		return &outbox.ConfigError{Field: "outboxnats.Stream.Subjects", Value: "[]", Fix: `give the subjects the publisher sends to, e.g. "orders.>" for SubjectPrefix "orders."`}
	case s.Duplicates < 0, s.MaxAge < 0, s.Replicas < 0:
		return &outbox.ConfigError{Field: "outboxnats.Stream", Value: fmt.Sprintf("Duplicates %v, MaxAge %v, Replicas %d", s.Duplicates, s.MaxAge, s.Replicas), Fix: "use positive values, or 0 for the defaults"}
	}
	for _, subj := range s.Subjects {
		if subj == "" || strings.ContainsAny(subj, " \t\r\n") {
			return &outbox.ConfigError{Field: "outboxnats.Stream.Subjects", Value: fmt.Sprintf("%q", subj), Fix: "use subjects without spaces, e.g. orders.>"}
		}
	}
	return nil
}

// DeclareStream creates the stream s describes, or brings the one that
// exists in line with it. Declaring is idempotent: a stream that exists with
// every subject of s, and the Duplicates, MaxAge and Replicas s sets (the
// zero ones are not compared), is left as it is (ActionExists). Otherwise
// the missing subjects are added and those settings changed in place
// (ActionUpdated); everything else, the subjects it had and its messages
// included, is kept. An error names the stream and the fix: subjects that
// another stream captures, say.
func DeclareStream(ctx context.Context, js jetstream.JetStream, s Stream) (Declared, error) {
	if err := s.Validate(); err != nil {
		return Declared{}, err
	}
	d := Declared{Kind: "stream", Name: s.Name}
	stream, err := js.Stream(ctx, s.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg := jetstream.StreamConfig{
			Name: s.Name, Subjects: s.Subjects, Storage: jetstream.FileStorage,
			Duplicates: s.Duplicates, MaxAge: s.MaxAge, Replicas: max(s.Replicas, 1),
		}
		_, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Created by someone else since the look-up: compare with it.
			stream, err = js.Stream(ctx, s.Name)
		} else if err == nil {
			d.Action = ActionCreated
			return d, nil
		}
	}
	if err != nil {
		return Declared{}, streamError(s, err)
	}
	cfg := stream.CachedInfo().Config
	changed := false
	for _, subj := range s.Subjects {
		if !slices.Contains(cfg.Subjects, subj) {
			cfg.Subjects = append(cfg.Subjects, subj)
			changed = true
		}
	}
	set := func(field *time.Duration, want time.Duration) {
		if want != 0 && *field != want {
			*field, changed = want, true
		}
	}
	set(&cfg.Duplicates, s.Duplicates)
	set(&cfg.MaxAge, s.MaxAge)
	if s.Replicas != 0 && cfg.Replicas != s.Replicas {
		cfg.Replicas, changed = s.Replicas, true
	}
	if !changed {
		d.Action = ActionExists
		return d, nil
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return Declared{}, streamError(s, fmt.Errorf("it exists with other settings, and changing them failed: %w", err))
	}
	d.Action = ActionUpdated
	return d, nil
}

// errCodeSubjectOverlap is the server's JSStreamSubjectOverlapErr, which
// nats.go has no name for.
const errCodeSubjectOverlap jetstream.ErrorCode = 10065

func streamError(s Stream, err error) error {
	fix := ""
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount):
		fix = " (enable JetStream on the server or for the account)"
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeSubjectOverlap:
		fix = " (another stream captures some of these subjects: a subject goes to one stream; use other subjects, or declare that stream instead)"
	}
	return fmt.Errorf("outboxnats: declare stream %s with subjects %v%s: %w", s.Name, s.Subjects, fix, err)
}

// serverConfig is the durable consumer Consume reads through, for c with
// its defaults. DeclareConsumer creates the same, so that Consume finds it
// as it would have made it.
func (c ConsumerConfig) serverConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		FilterSubject: c.FilterSubject,
		// The consumer counts attempts itself and parks; the server only
		// bounds what is unacknowledged.
		MaxAckPending: c.Concurrency * 32,
	}
}

// DeclareConsumer creates the durable consumer Consume reads cfg.Stream
// through, with the settings Consume gives it for cfg (Durable,
// FilterSubject, AckWait; Concurrency bounds the messages unacknowledged),
// so that it exists before the first message comes: pass the cfg you pass
// to Consume. Declaring is idempotent: a consumer that exists with those
// settings is left as it is (ActionExists, its position kept); one with
// other AckWait, FilterSubject or bound is changed in place (ActionUpdated).
// One the server cannot change in place (another deliver or ack policy, a
// push consumer) is left as it is, and the error says how to replace it.
// MaxDeliver is not the server's: Consume counts attempts itself.
func DeclareConsumer(ctx context.Context, js jetstream.JetStream, cfg ConsumerConfig) (Declared, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Declared{}, err
	}
	want := cfg.serverConfig()
	d := Declared{Kind: "consumer", Name: cfg.Durable}
	cons, err := js.Consumer(ctx, cfg.Stream, cfg.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if _, err = js.CreateConsumer(ctx, cfg.Stream, want); err == nil {
			d.Action = ActionCreated
			return d, nil
		}
		if errors.Is(err, jetstream.ErrConsumerExists) {
			// Created by someone else since the look-up, with other
			// settings: bring them in line below.
			cons, err = js.Consumer(ctx, cfg.Stream, cfg.Durable)
		}
	}
	if err != nil {
		return Declared{}, consumerError(cfg, err)
	}
	got := cons.CachedInfo().Config
	if got.AckPolicy == want.AckPolicy && got.AckWait == want.AckWait && got.FilterSubject == want.FilterSubject &&
		got.MaxAckPending == want.MaxAckPending && got.DeliverPolicy == want.DeliverPolicy && got.DeliverSubject == "" {
		d.Action = ActionExists
		return d, nil
	}
	if _, err := js.UpdateConsumer(ctx, cfg.Stream, want); err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) {
			// The server answers 400 or 500 (deliver policy) for settings
			// it cannot change in place.
			return Declared{}, fmt.Errorf("outboxnats: declare consumer %s on stream %s: it exists with settings the server cannot change into those Consume reads with "+
				"(deliver policy %v, ack policy %v, push consumer %t): delete it, e.g. nats consumer rm %s %s, and declare it again; "+
				"the stream's stored messages then come again from the first, which the inbox skips: %w",
				cfg.Durable, cfg.Stream, got.DeliverPolicy, got.AckPolicy, got.DeliverSubject != "", cfg.Stream, cfg.Durable, err)
		}
		return Declared{}, consumerError(cfg, err)
	}
	d.Action = ActionUpdated
	return d, nil
}

func consumerError(cfg ConsumerConfig, err error) error {
	fix := ""
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		fix = " (no such stream: declare it first, with DeclareStream)"
	}
	return fmt.Errorf("outboxnats: declare consumer %s on stream %s%s: %w", cfg.Durable, cfg.Stream, fix, err)
}
