package outbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
)

// resolve runs m through ResolveClaimChecks and returns its error and
// whether the handler was called.
func resolve(t *testing.T, blobs outbox.BlobStore, m outbox.Message) (error, bool) {
	t.Helper()
	called := false
	err := outbox.ResolveClaimChecks(blobs, func(context.Context, outbox.Message) error {
		called = true
		return nil
	})(t.Context(), m)
	return err, called
}

func TestAMissingBlobFailsItsMessageRetryablyWithErrBlobNotFound(t *testing.T) {
	t.Parallel()
	m := message("a", "", nil)
	m.Headers[outbox.HeaderClaimCheck] = "key=outbox-claim-check/" + m.ID.String() + "; size=10"
	err, called := resolve(t, outbox.DirBlobStore(t.TempDir()), m)
	if !errors.Is(err, outbox.ErrBlobNotFound) || outbox.IsPermanent(err) || called {
		t.Fatalf("message %s whose blob is missing: %v, handler called: %v; want a retryable ErrBlobNotFound and no call", m.ID, err, called)
	}
}

func TestAMalformedClaimCheckHeaderFailsPermanently(t *testing.T) {
	t.Parallel()
	for _, value := range []string{"", "key=", "key=a", "size=3", "key=a; size=-1", "key=a; size=x", "just-a-key"} {
		m := message("a", "", nil)
		m.Headers[outbox.HeaderClaimCheck] = value
		err, called := resolve(t, outbox.DirBlobStore(t.TempDir()), m)
		if !outbox.IsPermanent(err) || called {
			t.Errorf("header %q: %v, handler called: %v; want a permanent failure and no call", value, err, called)
		}
	}
}

func TestABlobOfAnotherSizeThanTheHeaderSaysFailsPermanently(t *testing.T) {
	t.Parallel()
	blobs := outbox.DirBlobStore(t.TempDir())
	if err := blobs.Put(t.Context(), "k", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	m := message("a", "", nil)
	m.Headers[outbox.HeaderClaimCheck] = "key=k; size=6"
	if err, called := resolve(t, blobs, m); !outbox.IsPermanent(err) || called {
		t.Fatalf("a 5-byte blob for a 6-byte payload: %v, handler called: %v; want a permanent failure and no call", err, called)
	}
}

func TestAClaimCheckHeaderIsFoundInAnyCase(t *testing.T) {
	t.Parallel()
	blobs := outbox.DirBlobStore(t.TempDir())
	if err := blobs.Put(t.Context(), "k", []byte("12345")); err != nil {
		t.Fatal(err)
	}
	m := outbox.Message{ID: uuid.New(), Topic: "a", Headers: map[string]string{"outbox-claim-check": "key=k; size=5"}}
	var got outbox.Message
	err := outbox.ResolveClaimChecks(blobs, func(_ context.Context, m outbox.Message) error { got = m; return nil })(t.Context(), m)
	if err != nil || string(got.Payload) != "12345" || len(got.Headers) != 0 {
		t.Fatalf("a lower-case header, as an AMQP or HTTP consumer may see it: %v, payload %q, headers %v; want the payload and no header", err, got.Payload, got.Headers)
	}
	if len(m.Headers) != 1 {
		t.Fatal("ResolveClaimChecks changed the caller's headers")
	}
}

func TestAHandlersErrorComesBackFromResolveClaimChecks(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	err := outbox.ResolveClaimChecks(outbox.DirBlobStore(t.TempDir()), func(context.Context, outbox.Message) error { return boom })(t.Context(), message("a", "", []byte("x")))
	if !errors.Is(err, boom) {
		t.Fatalf("got %v; want the handler's error", err)
	}
}

// deadTable is a DeadDiscarder whose dead messages are in dead.
type deadTable struct{ dead map[uuid.UUID]bool }

func (d *deadTable) DiscardDead(_ context.Context, ids ...uuid.UUID) (int, error) {
	n := 0
	for _, id := range ids {
		if d.dead[id] {
			delete(d.dead, id)
			n++
		}
	}
	return n, nil
}

func TestDiscardingADeadMessageDeletesItsBlobAndLeavesTheBlobsOfOthers(t *testing.T) {
	t.Parallel()
	cfg := outbox.ClaimCheckConfig{Prefix: "claims/"}
	blobs := outbox.DirBlobStore(t.TempDir())
	dead, pending, noBlob := uuid.New(), uuid.New(), uuid.New()
	for _, id := range []uuid.UUID{dead, pending} {
		if err := blobs.Put(t.Context(), cfg.Key(id), []byte("payload")); err != nil {
			t.Fatal(err)
		}
	}
	table := &deadTable{dead: map[uuid.UUID]bool{dead: true, noBlob: true}}
	n, err := outbox.DiscardDeadBlobs(t.Context(), table, blobs, cfg, dead, pending, noBlob)
	if err != nil || n != 2 {
		t.Fatalf("DiscardDeadBlobs: %d, %v; want the 2 dead messages discarded", n, err)
	}
	if _, err := blobs.Get(t.Context(), cfg.Key(dead)); !errors.Is(err, outbox.ErrBlobNotFound) {
		t.Fatalf("the blob of discarded message %s: %v; want it deleted", dead, err)
	}
	if _, err := blobs.Get(t.Context(), cfg.Key(pending)); err != nil {
		t.Fatalf("the blob of message %s, which was not dead: %v; want it kept for its publish", pending, err)
	}
}
