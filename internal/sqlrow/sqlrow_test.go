package sqlrow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/outboxdriver"
)

func TestInsertableRefusesWhatCannotBeStored(t *testing.T) {
	t.Parallel()
	if _, _, err := Insertable("pkg", "t", nil, 2, 5); err == nil || err.Error() != "pkg: insert into t: message 2 of 5 is nil" {
		t.Errorf("nil message: %v", err)
	}
	_, _, err := Insertable("pkg", "t", &outboxdriver.Message{Topic: "a"}, 0, 1)
	if err == nil || !strings.HasPrefix(err.Error(), `pkg: insert into t: message 0 of 1 (topic "a") has no ID`) {
		t.Errorf("message without ID: %v", err)
	}
}

func TestInsertableStoredValues(t *testing.T) {
	t.Parallel()
	m := &outboxdriver.Message{ID: uuid.New(), Topic: "a"}
	payload, headers, err := Insertable("pkg", "t", m, 0, 1)
	if err != nil || payload == nil || len(payload) != 0 || headers != nil {
		t.Errorf("no payload, no headers: payload %#v, headers %#v, %v; want empty non-nil payload, nil headers (NULL)", payload, headers, err)
	}
	m.Payload, m.Headers = []byte("p"), map[string]string{"k": "v"}
	payload, headers, err = Insertable("pkg", "t", m, 0, 1)
	if err != nil || string(payload) != "p" || string(headers) != `{"k":"v"}` {
		t.Errorf("payload %q, headers %q, %v; want p, {\"k\":\"v\"}", payload, headers, err)
	}
}

func TestFill(t *testing.T) {
	t.Parallel()
	east := time.FixedZone("east", 3600)
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, east)
	m := outboxdriver.Message{ID: uuid.New(), CreatedAt: at, AvailableAt: at}
	err := Fill(&m, "pkg", Columns{Headers: []byte(`{"a":"b"}`), HasHeaders: true, LastError: "e", Status: "dead", PublishedAt: at})
	if err != nil {
		t.Fatalf("Fill = %v", err)
	}
	if m.Headers["a"] != "b" || m.LastError != "e" || m.Status != outboxdriver.StatusDead || m.Payload == nil {
		t.Errorf("filled %+v", m)
	}
	for name, got := range map[string]time.Time{"CreatedAt": m.CreatedAt, "AvailableAt": m.AvailableAt, "PublishedAt": m.PublishedAt} {
		if got.Location() != time.UTC || !got.Equal(at) {
			t.Errorf("%s = %v, want %v in UTC", name, got, at)
		}
	}

	var unpublished outboxdriver.Message
	if err := Fill(&unpublished, "pkg", Columns{Status: "pending"}); err != nil || unpublished.Headers != nil || !unpublished.PublishedAt.IsZero() {
		t.Errorf("NULL headers and published_at: %+v, %v; want no headers, zero PublishedAt", unpublished, err)
	}
}

func TestFillReportsUndecodableHeaders(t *testing.T) {
	t.Parallel()
	for _, stored := range []string{``, `[1]`, `{"a":null}`, `{"a":1}`} {
		m := outboxdriver.Message{ID: uuid.New()}
		err := Fill(&m, "pkg", Columns{Headers: []byte(stored), HasHeaders: true})
		if err == nil || !strings.HasPrefix(err.Error(), "pkg: message "+m.ID.String()+" cannot be published") {
			t.Errorf("headers %q: %v, want an error naming the message", stored, err)
		}
		if m.Headers != nil {
			t.Errorf("headers %q: message keeps headers %v, want none", stored, m.Headers)
		}
	}
}

// fakeRows yields n rows, then err.
type fakeRows struct {
	n, at int
	err   error
}

func (r *fakeRows) Next() bool { r.at++; return r.at <= r.n }
func (r *fakeRows) Err() error { return r.err }

func TestCollect(t *testing.T) {
	t.Parallel()
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	scan := func(r *fakeRows) (outboxdriver.Message, error, error) {
		m := outboxdriver.Message{ID: ids[r.at-1]}
		if r.at == 2 {
			return m, errors.New("bad headers"), nil
		}
		return m, nil, nil
	}
	msgs, undecodable, err := Collect(&fakeRows{n: 3}, 0, scan)
	if err != nil || len(msgs) != 3 || msgs[2].ID != ids[2] {
		t.Fatalf("Collect = %v, %v; want the 3 messages", msgs, err)
	}
	if len(undecodable) != 1 || undecodable[0] != (outboxdriver.Failure{ID: ids[1], Error: "bad headers"}) {
		t.Errorf("undecodable = %v, want message 2 with its reason", undecodable)
	}

	failed := errors.New("connection lost")
	if msgs, _, err := Collect(&fakeRows{n: 3, err: failed}, 0, scan); err != failed || msgs != nil {
		t.Errorf("rows failing at the end: %v, %v; want no messages and the error", msgs, err)
	}
	scanFails := func(*fakeRows) (outboxdriver.Message, error, error) { return outboxdriver.Message{}, nil, failed }
	if msgs, _, err := Collect(&fakeRows{n: 3}, 0, scanFails); err != failed || msgs != nil {
		t.Errorf("scan failing: %v, %v; want no messages and the error", msgs, err)
	}
}
