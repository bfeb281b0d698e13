package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// recordingPublisher confirms every message and keeps what it was given.
type recordingPublisher struct {
	mu      sync.Mutex
	batches [][]outbox.Message
	closed  bool
	fail    map[uuid.UUID]error
}

func (p *recordingPublisher) Publish(_ context.Context, batch []outbox.Message) []error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.batches = append(p.batches, batch)
	errs := make([]error, len(batch))
	for i, m := range batch {
		errs[i] = p.fail[m.ID]
	}
	return errs
}

func (p *recordingPublisher) Close() error { p.closed = true; return nil }

func (p *recordingPublisher) sent() []outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []outbox.Message
	for _, b := range p.batches {
		all = append(all, b...)
	}
	return all
}

// keyOrderPublisher is a recordingPublisher that keeps key order.
type keyOrderPublisher struct{ recordingPublisher }

func (*keyOrderPublisher) KeepsKeyOrder() {}

// failingBlobs is a DirBlobStore whose Put fails for the keys in fail.
type failingBlobs struct {
	outbox.DirBlobStore
	fail map[string]error
}

func (b failingBlobs) Put(ctx context.Context, key string, data []byte) error {
	if err := b.fail[key]; err != nil {
		return err
	}
	return b.DirBlobStore.Put(ctx, key, data)
}

func message(topic, key string, payload []byte) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: topic, Key: key, Payload: payload,
		Headers: map[string]string{"Content-Type": "application/octet-stream"}}
}

func payloadOf(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func claimCheck(t *testing.T, pub outbox.Publisher, blobs outbox.BlobStore, cfg outbox.ClaimCheckConfig) outbox.Publisher {
	t.Helper()
	cc, err := outbox.ClaimCheck(pub, blobs, cfg)
	if err != nil {
		t.Fatalf("ClaimCheck: %v", err)
	}
	return cc
}

func requireNoErrors(t *testing.T, batch []outbox.Message, errs []error) {
	t.Helper()
	if len(errs) != len(batch) {
		t.Fatalf("Publish returned %d results for %d messages", len(errs), len(batch))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %s: %v; want it published", batch[i].ID, err)
		}
	}
}

func TestALargePayloadTravelsAsABlobAndComesBackByteForByteWhileASmallOneTravelsUntouched(t *testing.T) {
	t.Parallel()
	blobs := outbox.DirBlobStore(t.TempDir())
	pub := &recordingPublisher{}
	cc := claimCheck(t, pub, blobs, outbox.ClaimCheckConfig{Threshold: 1000})
	large := message("orders.exported", "o-1", payloadOf(3<<20, 1))
	atThreshold := message("orders.created", "o-2", payloadOf(1000, 2))
	batch := []outbox.Message{large, atThreshold}
	requireNoErrors(t, batch, cc.Publish(t.Context(), batch))

	sent := pub.sent()
	if len(sent) != 2 {
		t.Fatalf("the wrapped publisher got %d messages; want 2", len(sent))
	}
	if len(sent[0].Payload) != 0 || !strings.HasPrefix(sent[0].Headers[outbox.HeaderClaimCheck], "key=outbox-claim-check/"+large.ID.String()+"; size=3145728") {
		t.Fatalf("message %s over the threshold was sent with %d payload bytes and %s %q; want none and the blob's key and size",
			large.ID, len(sent[0].Payload), outbox.HeaderClaimCheck, sent[0].Headers[outbox.HeaderClaimCheck])
	}
	if !bytes.Equal(sent[1].Payload, atThreshold.Payload) || !maps.Equal(sent[1].Headers, atThreshold.Headers) {
		t.Fatalf("message %s at the threshold was changed: %d bytes, headers %v", atThreshold.ID, len(sent[1].Payload), sent[1].Headers)
	}
	if len(batch[0].Payload) != 3<<20 || len(batch[0].Headers) != 1 {
		t.Fatalf("the relay's message %s was changed: %d bytes, headers %v; the publisher must work on a copy", large.ID, len(batch[0].Payload), batch[0].Headers)
	}

	var got []outbox.Message
	handle := outbox.ResolveClaimChecks(blobs, func(_ context.Context, m outbox.Message) error {
		got = append(got, m)
		return nil
	})
	for _, m := range sent {
		if err := handle(t.Context(), m); err != nil {
			t.Fatalf("resolving message %s: %v", m.ID, err)
		}
	}
	for i, want := range batch {
		if !bytes.Equal(got[i].Payload, want.Payload) || !maps.Equal(got[i].Headers, want.Headers) {
			t.Fatalf("message %s reached the handler with %d bytes and headers %v; want its %d bytes and headers %v",
				want.ID, len(got[i].Payload), got[i].Headers, len(want.Payload), want.Headers)
		}
	}
}

func TestAFailedPutFailsItsMessageAloneRetryablyOrPermanentlyAsTheBlobStoreSays(t *testing.T) {
	t.Parallel()
	cfg := outbox.ClaimCheckConfig{Threshold: 10}
	down, tooBig := message("a", "", payloadOf(100, 1)), message("b", "", payloadOf(100, 2))
	fine, small := message("c", "", payloadOf(100, 3)), message("d", "", payloadOf(5, 4))
	blobs := failingBlobs{DirBlobStore: outbox.DirBlobStore(t.TempDir()), fail: map[string]error{
		cfg.Key(down.ID):   errors.New("connection reset"),
		cfg.Key(tooBig.ID): outbox.Permanent(errors.New("entity too large")),
	}}
	pub := &recordingPublisher{}
	batch := []outbox.Message{down, tooBig, fine, small}
	errs := claimCheck(t, pub, blobs, cfg).Publish(t.Context(), batch)

	if errs[0] == nil || outbox.IsPermanent(errs[0]) || !strings.Contains(errs[0].Error(), "connection reset") {
		t.Fatalf("message %s whose Put failed: %v; want the store's retryable error", down.ID, errs[0])
	}
	if !outbox.IsPermanent(errs[1]) {
		t.Fatalf("message %s whose Put failed permanently: %v; want a permanent error", tooBig.ID, errs[1])
	}
	if errs[2] != nil || errs[3] != nil {
		t.Fatalf("the other messages failed: %v, %v; want them published", errs[2], errs[3])
	}
	var ids []uuid.UUID
	for _, m := range pub.sent() {
		ids = append(ids, m.ID)
	}
	if len(ids) != 2 || ids[0] != fine.ID || ids[1] != small.ID {
		t.Fatalf("the wrapped publisher got %v; want only %s and %s, whose payloads are stored or small", ids, fine.ID, small.ID)
	}
}

func TestARetryOverwritesTheSameBlobLeavingOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pub := &recordingPublisher{}
	m := message("a", "", payloadOf(100, 1))
	pub.fail = map[uuid.UUID]error{m.ID: errors.New("broker refused")}
	cc := claimCheck(t, pub, outbox.DirBlobStore(dir), outbox.ClaimCheckConfig{Threshold: 10})
	for range 3 {
		if errs := cc.Publish(t.Context(), []outbox.Message{m}); errs[0] == nil {
			t.Fatal("the broker's refusal did not fail the message")
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("three attempts left %d files in the blob store; want the one blob of message %s", len(entries), m.ID)
	}
}

func TestTheClaimCheckOfAKeyOrderKeeperHoldsBackAKeyAfterAFailedPut(t *testing.T) {
	t.Parallel()
	cfg := outbox.ClaimCheckConfig{Threshold: 10}
	first, second := message("a", "k", payloadOf(100, 1)), message("a", "k", payloadOf(5, 2))
	other := message("a", "j", payloadOf(100, 3))
	blobs := failingBlobs{DirBlobStore: outbox.DirBlobStore(t.TempDir()), fail: map[string]error{cfg.Key(first.ID): errors.New("timeout")}}
	pub := &keyOrderPublisher{}
	cc := claimCheck(t, pub, blobs, cfg)
	if _, keeps := cc.(outbox.KeyOrderKeeper); !keeps {
		t.Fatal("the claim check of a KeyOrderKeeper is not one: the relay would send it a key's messages in waves")
	}
	errs := cc.Publish(t.Context(), []outbox.Message{first, second, other})
	if !outbox.IsHeldBack(errs[1]) {
		t.Fatalf("message %s behind the failed Put of its key: %v; want it held back", second.ID, errs[1])
	}
	if sent := pub.sent(); len(sent) != 1 || sent[0].ID != other.ID {
		t.Fatalf("the wrapped publisher got %d messages; want only %s of the other key", len(sent), other.ID)
	}
}

func TestTheClaimCheckOfAPublisherThatDoesNotKeepKeyOrderDoesNotClaimTo(t *testing.T) {
	t.Parallel()
	cc := claimCheck(t, &recordingPublisher{}, outbox.DirBlobStore(t.TempDir()), outbox.ClaimCheckConfig{})
	if _, keeps := cc.(outbox.KeyOrderKeeper); keeps {
		t.Fatal("the claim check of a broker publisher claims to keep key order; the relay would hand it whole batches")
	}
}

func TestClosingTheClaimCheckClosesTheWrappedPublisher(t *testing.T) {
	t.Parallel()
	pub := &keyOrderPublisher{}
	if err := claimCheck(t, pub, outbox.DirBlobStore(t.TempDir()), outbox.ClaimCheckConfig{}).Close(); err != nil || !pub.closed {
		t.Fatalf("Close: %v, wrapped publisher closed: %v; want it closed", err, pub.closed)
	}
}

func TestAMessageWrittenWithTheClaimCheckHeaderFailsPermanentlyUnsent(t *testing.T) {
	t.Parallel()
	m := message("a", "", []byte("{}"))
	m.Headers["outbox-claim-check"] = "key=someone-elses; size=2"
	pub := &recordingPublisher{}
	errs := claimCheck(t, pub, outbox.DirBlobStore(t.TempDir()), outbox.ClaimCheckConfig{}).Publish(t.Context(), []outbox.Message{m})
	if !outbox.IsPermanent(errs[0]) || len(pub.sent()) != 0 {
		t.Fatalf("message %s with its own claim check header: %v, %d sent; want a permanent failure, unsent", m.ID, errs[0], len(pub.sent()))
	}
}

func TestAWrongNumberOfResultsFromTheWrappedPublisherFailsEveryMessageItGot(t *testing.T) {
	t.Parallel()
	short := outbox.PublisherFunc(func(context.Context, []outbox.Message) []error { return nil })
	batch := []outbox.Message{message("a", "", nil), message("b", "", nil)}
	errs := claimCheck(t, short, outbox.DirBlobStore(t.TempDir()), outbox.ClaimCheckConfig{}).Publish(t.Context(), batch)
	if len(errs) != 2 || errs[0] == nil || errs[1] == nil {
		t.Fatalf("with no results from the wrapped publisher: %v; want a failure per message", errs)
	}
}

func TestAnInvalidClaimCheckConfigNamesTheField(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]outbox.ClaimCheckConfig{
		"Threshold":      {Threshold: -1},
		"PutConcurrency": {PutConcurrency: -1},
		"Prefix":         {Prefix: "claims with spaces/"},
	} {
		_, err := outbox.ClaimCheck(&recordingPublisher{}, outbox.DirBlobStore("x"), cfg)
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || ce.Field != "ClaimCheckConfig."+field {
			t.Errorf("ClaimCheck with a bad %s: %v; want a *ConfigError naming it", field, err)
		}
	}
	if _, err := outbox.ClaimCheck(nil, outbox.DirBlobStore("x"), outbox.ClaimCheckConfig{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("ClaimCheck of no publisher: %v; want ErrInvalidConfig", err)
	}
	if _, err := outbox.ClaimCheck(&recordingPublisher{}, nil, outbox.ClaimCheckConfig{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("ClaimCheck with no blob store: %v; want ErrInvalidConfig", err)
	}
}
