package outbox

import "sync"

// The in-process wake-up: writers and relays of one process that serve the same
// table (by Store.Name) share a wakeTopic. A writer notifies it after a commit;
// every relay subscribed to it wakes. This is the post-commit hand-off: the
// relay hears of the message with no database round trip and no lock taken at
// commit.

var wakeTopics = struct {
	sync.Mutex
	byName map[string]*wakeTopic
}{byName: map[string]*wakeTopic{}}

func wakeTopicFor(name string) *wakeTopic {
	wakeTopics.Lock()
	defer wakeTopics.Unlock()
	t := wakeTopics.byName[name]
	if t == nil {
		t = &wakeTopic{subs: map[chan struct{}]struct{}{}}
		wakeTopics.byName[name] = t
	}
	return t
}

type wakeTopic struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// subscribe returns a channel that receives a value (coalesced) after each
// notify, and a function that ends the subscription.
func (t *wakeTopic) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		delete(t.subs, ch)
		t.mu.Unlock()
	}
}

func (t *wakeTopic) notify() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for ch := range t.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}
