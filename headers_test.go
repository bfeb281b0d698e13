package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// countingInserter counts the messages that reach the store, so a test can
// tell that a refused write inserted nothing.
type countingInserter struct{ inserted int }

func (c *countingInserter) InsertTx(_ context.Context, _ struct{}, msgs []*Message) error {
	c.inserted += len(msgs)
	return nil
}

func (c *countingInserter) Name() string { return "test.headers" }

func newTestWriter(t *testing.T, cfg WriterConfig) (*Writer[struct{}], *countingInserter) {
	t.Helper()
	in := &countingInserter{}
	w, err := NewWriter[struct{}](in, cfg)
	if err != nil {
		t.Fatalf("NewWriter(%+v) = %v", cfg, err)
	}
	return w, in
}

// requireHeaderError fails unless err is a *MessageError for field whose
// value and reason contain the given texts.
func requireHeaderError(t *testing.T, err error, field, value string, reason ...string) {
	t.Helper()
	var me *MessageError
	if !errors.As(err, &me) {
		t.Fatalf("Write() = %v, want a *MessageError for %s %q", err, field, value)
	}
	if me.Field != field || me.Value != value {
		t.Fatalf("MessageError Field %q Value %q, want Field %q Value %q (error: %v)", me.Field, me.Value, field, value, err)
	}
	for _, want := range reason {
		if !strings.Contains(me.Reason, want) {
			t.Errorf("MessageError.Reason %q does not say %q", me.Reason, want)
		}
	}
}

func TestWriterRefusesHeadersThatWouldSteerATransportInAnyCase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		why  string // a word of the reason
	}{
		{"Authorization", "credentials"},
		{"authorization", "credentials"},
		{"Cookie", "credentials"},
		{"PROXY-AUTHORIZATION", "proxy"},
		{"Host", "host"},
		{"webhook-id", "sign"},
		{"Webhook-Timestamp", "sign"},
		{"WEBHOOK-SIGNATURE", "sign"},
		{"Outbox-Message-Id", "message id"},
		{"idempotency-key", "message id"},
		{"Outbox-Key", "Key field"},
		{"outbox-topic", "Topic field"},
		{"Connection", "framing"},
		{"Content-Length", "framing"},
		{"Keep-Alive", "framing"},
		{"Proxy-Connection", "framing"},
		{"TE", "framing"},
		{"Trailer", "framing"},
		{"transfer-encoding", "framing"},
		{"Upgrade", "framing"},
		{"Nats-Msg-Id", "JetStream"},
		{"nats-expected-stream", "JetStream"},
		{"NATS-Rollup", "JetStream"},
		{"Nats-TTL", "JetStream"},
		{"CC", "RabbitMQ"},
		{"bcc", "RabbitMQ"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, in := newTestWriter(t, WriterConfig{})
			ok := &Message{Topic: "orders.created"}
			bad := &Message{Topic: "orders.created", Headers: map[string]string{"traceparent": "00-abc", tt.name: "forged"}}
			err := w.Write(context.Background(), struct{}{}, ok, bad)
			requireHeaderError(t, err, "Headers", tt.name, "reserved", tt.why, "use another header name")
			if !errors.Is(err, ErrInvalidMessage) {
				t.Errorf("errors.Is(%v, ErrInvalidMessage) = false", err)
			}
			if !strings.Contains(err.Error(), tt.name) {
				t.Errorf("error %q does not name the header %q", err, tt.name)
			}
			if in.inserted != 0 {
				t.Errorf("%d message(s) inserted by a refused write, want none of the batch", in.inserted)
			}
			if err := ValidateHeaderName(tt.name); err == nil || !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), "reserved") {
				t.Errorf("ValidateHeaderName(%q) = %v, want an error naming it reserved", tt.name, err)
			}
		})
	}
}

func TestWriterRefusesAReservedHeaderButAcceptsNamesThatOnlyResembleOne(t *testing.T) {
	t.Parallel()
	w, in := newTestWriter(t, WriterConfig{})
	lookalikes := map[string]string{
		"Content-Type": "application/json", "traceparent": "00-abc", "X-Authorization": "x", "Authorization-Hint": "x",
		"X-Nats-Msg-Id": "x", "Nats": "x", "NatsMsgId": "x", "CCC": "x", "X-CC": "x", "Webhook-Id-Original": "x",
		"Outbox-Keys": "x", "Hostname": "x",
	}
	withReserved := map[string]string{"Nats-Expected-Last-Sequence": "0"}
	for k, v := range lookalikes {
		withReserved[k] = v
	}
	err := w.Write(context.Background(), struct{}{}, &Message{Topic: "orders.created", Headers: withReserved})
	requireHeaderError(t, err, "Headers", "Nats-Expected-Last-Sequence", "reserved")
	if err := w.Write(context.Background(), struct{}{}, &Message{Topic: "orders.created", Headers: lookalikes}); err != nil {
		t.Fatalf("Write() of headers that only resemble reserved ones = %v, want nil", err)
	}
	if in.inserted != 1 {
		t.Fatalf("%d message(s) inserted, want 1", in.inserted)
	}
}

func TestWriterLimitsHeaderCountAndValueSizeByDefault(t *testing.T) {
	t.Parallel()
	w, in := newTestWriter(t, WriterConfig{})
	ctx := context.Background()
	headers := func(n int) map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("x-h%d", i)] = "v"
		}
		return h
	}

	if err := w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: headers(64)}); err != nil {
		t.Fatalf("Write() of 64 headers = %v, want nil (the default limit is 64)", err)
	}
	err := w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: headers(65)})
	requireHeaderError(t, err, "Headers", "65 headers", "limit of 64", "WriterConfig.MaxHeaders")

	if err := w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: map[string]string{"x-big": strings.Repeat("v", 8<<10)}}); err != nil {
		t.Fatalf("Write() of an 8 KiB header value = %v, want nil (the default limit is 8 KiB)", err)
	}
	err = w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: map[string]string{"x-big": strings.Repeat("v", 8<<10+1)}})
	requireHeaderError(t, err, "Headers[x-big]", "8193 bytes", "limit of 8192 bytes", "WriterConfig.MaxHeaderValueBytes")
	if in.inserted != 2 {
		t.Fatalf("%d message(s) inserted, want the 2 within the limits", in.inserted)
	}
}

func TestWriterHeaderLimitsAreConfigurable(t *testing.T) {
	t.Parallel()
	w, _ := newTestWriter(t, WriterConfig{MaxHeaders: 2, MaxHeaderValueBytes: 4})
	ctx := context.Background()
	if err := w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: map[string]string{"a": "1234", "b": ""}}); err != nil {
		t.Fatalf("Write() at the configured limits = %v, want nil", err)
	}
	err := w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: map[string]string{"a": "1", "b": "2", "c": "3"}})
	requireHeaderError(t, err, "Headers", "3 headers", "limit of 2", "WriterConfig.MaxHeaders")
	err = w.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: map[string]string{"a": "12345"}})
	requireHeaderError(t, err, "Headers[a]", "5 bytes", "limit of 4 bytes", "WriterConfig.MaxHeaderValueBytes")

	big, _ := newTestWriter(t, WriterConfig{MaxHeaders: 1000, MaxHeaderValueBytes: 1 << 20})
	h := map[string]string{"x-big": strings.Repeat("v", 1<<20)}
	for i := range 999 {
		h[fmt.Sprintf("x-h%d", i)] = "v"
	}
	if err := big.Write(ctx, struct{}{}, &Message{Topic: "t", Headers: h}); err != nil {
		t.Fatalf("Write() within raised limits = %v, want nil", err)
	}
}

func TestNewWriterRejectsNegativeHeaderLimitsNamingTheFieldAndTheFix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		cfg   WriterConfig
		field string
		fix   string
	}{
		{WriterConfig{MaxHeaders: -1}, "WriterConfig.MaxHeaders", "0 for the default 64"},
		{WriterConfig{MaxHeaderValueBytes: -1}, "WriterConfig.MaxHeaderValueBytes", "0 for the default 8192"},
	}
	for _, tt := range tests {
		_, err := NewWriter[struct{}](&countingInserter{}, tt.cfg)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != tt.field || !strings.Contains(ce.Fix, tt.fix) {
			t.Errorf("NewWriter(%+v) = %v, want a *ConfigError for %s whose fix says %q", tt.cfg, err, tt.field, tt.fix)
		}
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("errors.Is(%v, ErrInvalidConfig) = false", err)
		}
	}
}
