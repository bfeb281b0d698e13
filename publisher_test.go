package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestHandlersCallTheTopicsHandlerAndFailUnknownTopicsPermanently(t *testing.T) {
	t.Parallel()
	var hs Handlers
	var seen []string
	hs.Handle("a", func(ctx context.Context, m Message) error { seen = append(seen, string(m.Payload)); return nil })
	hs.Handle("boom", func(ctx context.Context, m Message) error { return errors.New("broker down") })
	hs.Handle("panic", func(ctx context.Context, m Message) error { panic("bad") })
	errs := hs.Publish(context.Background(), []Message{
		{Topic: "a", Payload: []byte("1")}, {Topic: "nobody"}, {Topic: "boom"}, {Topic: "panic"}, {Topic: "a", Payload: []byte("2")},
	})
	if len(errs) != 5 {
		t.Fatalf("got %d results, want 5", len(errs))
	}
	if errs[0] != nil || errs[4] != nil {
		t.Errorf("handled messages failed: %v, %v", errs[0], errs[4])
	}
	if !IsPermanent(errs[1]) {
		t.Errorf("unknown topic: %v, want a permanent error", errs[1])
	}
	if errs[2] == nil || IsPermanent(errs[2]) {
		t.Errorf("failing handler: %v, want a retryable error", errs[2])
	}
	if errs[3] == nil || !strings.Contains(errs[3].Error(), "panicked") {
		t.Errorf("panicking handler: %v, want a retryable panic error", errs[3])
	}
	if strings.Join(seen, ",") != "1,2" {
		t.Errorf("handler saw %v, want [1 2] in order", seen)
	}
}

func TestPermanentWrapsAndIsDetected(t *testing.T) {
	t.Parallel()
	base := errors.New("bad payload")
	p := Permanent(base)
	if !IsPermanent(p) || !errors.Is(p, base) || p.Error() != "bad payload" {
		t.Fatalf("Permanent(%v) = %v: IsPermanent %v, wraps base %v", base, p, IsPermanent(p), errors.Is(p, base))
	}
	if Permanent(nil) != nil || IsPermanent(base) {
		t.Fatal("Permanent(nil) must be nil and a plain error must not be permanent")
	}
}

func TestJSONLinesWritesOneObjectPerMessage(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	j := &JSONLines{W: &buf}
	id := uuid.Must(uuid.NewV7())
	errs := j.Publish(context.Background(), []Message{
		{ID: id, Topic: "t", Key: "k", Payload: []byte(`{"a":1}`), Headers: map[string]string{"h": "v"}},
		{Topic: "bin", Payload: []byte{0xff, 0x00}},
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("wrote %d lines, want 2: %q", len(lines), buf.String())
	}
	var first struct {
		ID      string            `json:"id"`
		Key     string            `json:"key"`
		Payload map[string]int    `json:"payload"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first.ID != id.String() || first.Key != "k" || first.Payload["a"] != 1 || first.Headers["h"] != "v" {
		t.Errorf("first line = %s, fields lost", lines[0])
	}
	if !strings.Contains(lines[1], `"payload_base64":"/wA="`) {
		t.Errorf("binary payload line = %s, want base64", lines[1])
	}
}
