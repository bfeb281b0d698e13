package outbox

import (
	"context"
	"errors"
	"testing"
)

type traceKey struct{}

// BeforeWrite sees every message with the Write's context, before
// validation: what it adds is validated and stored like any header.
func TestBeforeWriteAddsHeadersFromTheContextAndTheyAreValidated(t *testing.T) {
	w, in := newTestWriter(t, WriterConfig{BeforeWrite: func(ctx context.Context, m *Message) {
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		m.Headers["traceparent"], _ = ctx.Value(traceKey{}).(string)
	}})
	ctx := context.WithValue(context.Background(), traceKey{}, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	m := &Message{Topic: "orders", Payload: []byte("x")}
	if err := w.Write(ctx, struct{}{}, m); err != nil {
		t.Fatal(err)
	}
	if m.Headers["traceparent"] != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || in.inserted != 1 {
		t.Fatalf("headers %v, %d inserted; want the context's traceparent on the inserted message", m.Headers, in.inserted)
	}

	bad, in := newTestWriter(t, WriterConfig{BeforeWrite: func(_ context.Context, m *Message) {
		m.Headers = map[string]string{"Authorization": "Bearer x"}
	}})
	var me *MessageError
	if err := bad.Write(ctx, struct{}{}, &Message{Topic: "orders"}); !errors.As(err, &me) || in.inserted != 0 {
		t.Fatalf("a reserved header added by BeforeWrite: %v, %d inserted; want a *MessageError and nothing inserted", err, in.inserted)
	}
}

// What BeforeWrite adds goes into the message's own copy of its headers: a
// map the caller shares between messages is left as it was.
func TestBeforeWriteLeavesTheCallersHeaderMapAlone(t *testing.T) {
	w, _ := newTestWriter(t, WriterConfig{BeforeWrite: func(ctx context.Context, m *Message) {
		m.Headers["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	}})
	shared := map[string]string{"tenant": "t-1"}
	a, b := &Message{Topic: "orders", Headers: shared}, &Message{Topic: "orders", Headers: shared}
	if err := w.Write(context.Background(), struct{}{}, a, b); err != nil {
		t.Fatal(err)
	}
	if len(shared) != 1 {
		t.Errorf("the caller's shared header map became %v; want it untouched", shared)
	}
	if a.Headers["traceparent"] == "" || a.Headers["tenant"] != "t-1" {
		t.Errorf("message headers %v; want the caller's plus the hook's", a.Headers)
	}
}
