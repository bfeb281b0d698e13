package consumetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/publishertest"
)

// KeyedBatch returns n messages of topic (publishertest.Messages) over keys
// keys ("k0", "k1"...), the keys taking turns.
func KeyedBatch(topic string, n, keys int) []outbox.Message {
	batch := publishertest.Messages(topic, n)
	for i := range batch {
		batch[i].Key = fmt.Sprintf("k%d", i%keys)
	}
	return batch
}

// KeyOrder watches a consumer's handler for the key-order tests: it sees two
// messages of one key handled at once, and how many messages were handled
// at once overall. Each key's first handler waits (up to 5 s) for a second
// key's to start, so that an adapter handling keys concurrently shows it
// however its work is scheduled, and one handling keys one at a time does
// not hang. Call Enter when a handler starts and Leave when it ends.
type KeyOrder struct {
	mu                  sync.Mutex
	running, maxRunning int
	perKey              map[string]int
	overlap             string
	started             map[string]bool
	twoKeys             chan struct{} // closed once handlers of two keys started
}

// NewKeyOrder returns a KeyOrder that has seen nothing yet.
func NewKeyOrder() *KeyOrder {
	return &KeyOrder{perKey: map[string]int{}, started: map[string]bool{}, twoKeys: make(chan struct{})}
}

// Enter notes that a handler of a message of key started.
func (k *KeyOrder) Enter(key string) {
	k.mu.Lock()
	k.running++
	k.maxRunning = max(k.maxRunning, k.running)
	k.perKey[key]++
	if k.perKey[key] > 1 {
		k.overlap = key
	}
	first := !k.started[key]
	k.started[key] = true
	if first && len(k.started) == 2 {
		close(k.twoKeys)
	}
	k.mu.Unlock()
	if first {
		select {
		case <-k.twoKeys:
		case <-time.After(5 * time.Second):
		}
	}
}

// Leave notes that a handler of a message of key ended.
func (k *KeyOrder) Leave(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running--
	k.perKey[key]--
}

// Require fails the test unless each key's messages of batch were handled
// in the order of batch (handled lists the ids in the order their handlers
// succeeded), no two of a key at once, and messages of different keys at
// once.
func (k *KeyOrder) Require(t testing.TB, batch []outbox.Message, handled []uuid.UUID) {
	t.Helper()
	keyOf := make(map[uuid.UUID]string, len(batch))
	for _, m := range batch {
		keyOf[m.ID] = m.Key
	}
	order := map[string][]uuid.UUID{}
	for _, id := range handled {
		if key, ok := keyOf[id]; ok {
			order[key] = append(order[key], id)
		}
	}
	seen := map[string]int{}
	for _, m := range batch {
		want := seen[m.Key]
		seen[m.Key]++
		if got := order[m.Key]; len(got) <= want || got[want] != m.ID {
			t.Fatalf("key %s: message %s handled out of order (%v)", m.Key, m.ID, got)
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.overlap != "" {
		t.Errorf("two messages of key %s were handled at once", k.overlap)
	}
	if k.maxRunning < 2 {
		t.Errorf("at most %d message(s) handled at once; want keys handled concurrently", k.maxRunning)
	}
}
