package outboxevents_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxevents"
)

type OrderPlaced struct {
	OrderID    string `json:"order_id"`
	TotalCents int    `json:"total_cents"`
}

type OrderPaid struct {
	OrderID string `json:"order_id"`
}

func newRegistry(t *testing.T) *outboxevents.Registry {
	t.Helper()
	r := outboxevents.NewRegistry(outboxevents.Options{Source: "/orders"})
	if err := outboxevents.Register[OrderPlaced](r, "orders.placed"); err != nil {
		t.Fatal(err)
	}
	if err := outboxevents.Register[OrderPaid](r, ""); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMessageCarriesCloudEventsHeadersAndDecodesBack(t *testing.T) {
	r := newRegistry(t)
	before := time.Now().UTC()
	m, err := r.Message(OrderPlaced{OrderID: "o-1", TotalCents: 1250}, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	h := m.Headers
	if m.Topic != "orders.placed" || m.Key != "o-1" || m.ID == uuid.Nil {
		t.Fatalf("message topic %q, key %q, id %v; want orders.placed, o-1 and an id", m.Topic, m.Key, m.ID)
	}
	want := map[string]string{
		"ce-specversion": "1.0", "ce-type": "orders.placed", "ce-id": m.ID.String(), "ce-source": "/orders",
		"ce-schemaversion": "1", "content-type": "application/json",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	at, err := time.Parse(time.RFC3339Nano, h["ce-time"])
	if err != nil || at.Before(before.Truncate(time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Errorf("ce-time %q (%v): want the time of writing in RFC 3339", h["ce-time"], err)
	}
	if !bytes.Equal(m.Payload, []byte(`{"order_id":"o-1","total_cents":1250}`)) {
		t.Errorf("payload %s", m.Payload)
	}
	for _, name := range []string{"ce-type", "ce-id", "content-type"} {
		if err := outbox.ValidateHeaderName(name); err != nil {
			t.Errorf("header %s cannot be written: %v", name, err)
		}
	}
	got, name, err := r.Decode(*m)
	if err != nil || name != "orders.placed" || got != (OrderPlaced{OrderID: "o-1", TotalCents: 1250}) {
		t.Fatalf("Decode = %#v, %q, %v", got, name, err)
	}
}

func TestDefaultNameIsTheTypeNameWithoutItsPackage(t *testing.T) {
	r := newRegistry(t)
	if name, err := r.Name(OrderPaid{}); err != nil || name != "OrderPaid" {
		t.Fatalf("Name(OrderPaid{}) = %q, %v; want OrderPaid", name, err)
	}
}

func TestUnknownAndUndecodableNameTheTypeAndTheRegisteredOnes(t *testing.T) {
	r := newRegistry(t)
	unknown := outbox.Message{ID: uuid.New(), Topic: "orders.cancelled", Headers: map[string]string{"ce-type": "orders.cancelled"}, Payload: []byte(`{}`)}
	_, _, err := r.Decode(unknown)
	if !errors.Is(err, outboxevents.ErrUnknownType) || !strings.Contains(err.Error(), `"orders.cancelled"`) || !strings.Contains(err.Error(), "OrderPaid, orders.placed") {
		t.Fatalf("Decode of an unknown type: %v; want ErrUnknownType naming it and the registered ones", err)
	}
	bad := outbox.Message{ID: uuid.New(), Topic: "orders.placed", Headers: map[string]string{"ce-type": "orders.placed"}, Payload: []byte(`{"total_cents":"many"}`)}
	if _, _, err := r.Decode(bad); !errors.Is(err, outboxevents.ErrUndecodable) || !strings.Contains(err.Error(), "orders.placed") {
		t.Fatalf("Decode of a bad body: %v; want ErrUndecodable naming the type", err)
	}
	if _, err := r.Message(struct{ X int }{}, ""); !errors.Is(err, outboxevents.ErrUnknownType) {
		t.Fatalf("Message of an unregistered type: %v; want ErrUnknownType", err)
	}
}

func TestRegisteringANameOrATypeTwiceFails(t *testing.T) {
	r := newRegistry(t)
	type Other struct{}
	if err := outboxevents.Register[Other](r, "orders.placed"); err == nil {
		t.Fatal("a second type under orders.placed was accepted")
	}
	if err := outboxevents.Register[OrderPlaced](r, "orders.placed.v2"); err == nil {
		t.Fatal("OrderPlaced registered twice")
	}
	if err := outboxevents.Register[error](r, "iface"); err == nil {
		t.Fatal("an interface type was accepted")
	}
}

// An event type renamed and reshaped: version 1 was "order_placed" with a
// total in euros; version 2 is orders.placed with cents. A message written
// under the old name and shape decodes as the new type.
func TestAliasAndUpcastBringAnOldMessageToTheCurrentType(t *testing.T) {
	old := outboxevents.NewRegistry(outboxevents.Options{})
	type OrderPlacedV1 struct {
		OrderID string  `json:"order_id"`
		Total   float64 `json:"total"`
	}
	outboxevents.MustRegister[OrderPlacedV1](old, "order_placed")
	m, err := old.Message(OrderPlacedV1{OrderID: "o-9", Total: 12.5}, "o-9")
	if err != nil {
		t.Fatal(err)
	}

	current := outboxevents.NewRegistry(outboxevents.Options{})
	err = outboxevents.Register[OrderPlaced](current, "orders.placed",
		outboxevents.Alias("order_placed"),
		outboxevents.Version(2),
		outboxevents.Upcast(1, func(body []byte) ([]byte, error) {
			return bytes.Replace(body, []byte(`"total":12.5`), []byte(`"total_cents":1250`), 1), nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	got, name, err := current.Decode(*m)
	if err != nil || name != "orders.placed" || got != (OrderPlaced{OrderID: "o-9", TotalCents: 1250}) {
		t.Fatalf("Decode of the old message = %#v, %q, %v; want OrderPlaced{o-9, 1250} under orders.placed", got, name, err)
	}
	fresh, err := current.Message(OrderPlaced{OrderID: "o-10"}, "")
	if err != nil || fresh.Topic != "orders.placed" || fresh.Headers["ce-schemaversion"] != "2" {
		t.Fatalf("new message: %v, topic %q, version %q; want the current name and version 2", err, fresh.Topic, fresh.Headers["ce-schemaversion"])
	}

	// Without an upcast for its version, an old message cannot decode.
	strict := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](strict, "orders.placed", outboxevents.Alias("order_placed"), outboxevents.Version(2))
	if _, _, err := strict.Decode(*m); !errors.Is(err, outboxevents.ErrUndecodable) || !strings.Contains(err.Error(), "Upcast(1") {
		t.Fatalf("Decode without an upcast: %v; want ErrUndecodable naming the missing Upcast", err)
	}
	// A message newer than the registered version asks for an upgrade.
	newer := *fresh
	newer.Headers = map[string]string{"ce-type": "orders.placed", "ce-schemaversion": "3"}
	if _, _, err := current.Decode(newer); !errors.Is(err, outboxevents.ErrNewerVersion) || !strings.Contains(err.Error(), "upgrade") {
		t.Fatalf("Decode of a newer version: %v; want ErrNewerVersion saying to upgrade", err)
	}
}

// A pointer type (a generated protobuf message, say) is handled as that
// pointer: Decode returns a new one.
func TestPointerTypesDecodeToANewPointer(t *testing.T) {
	r := outboxevents.NewRegistry(outboxevents.Options{})
	type Refunded struct{ OrderID string }
	outboxevents.MustRegister[*Refunded](r, "")
	m, err := r.Message(&Refunded{OrderID: "o-4"}, "")
	if err != nil || m.Topic != "Refunded" {
		t.Fatalf("Message: %v, topic %q; want the default name Refunded", err, m.Topic)
	}
	got, _, err := r.Decode(*m)
	if p, ok := got.(*Refunded); err != nil || !ok || p.OrderID != "o-4" {
		t.Fatalf("Decode = %#v, %v; want &Refunded{o-4}", got, err)
	}
}

// An event written by a newer release is retried, not dead-lettered: a
// process upgraded later in the deploy decodes it.
func TestDispatcherRetriesAnEventOfANewerVersion(t *testing.T) {
	reg := outboxevents.NewRegistry(outboxevents.Options{})
	outboxevents.MustRegister[OrderPlaced](reg, "orders.placed")
	d, err := outboxevents.NewDispatcher(reg, newMapInbox())
	if err != nil {
		t.Fatal(err)
	}
	m, err := reg.Message(OrderPlaced{OrderID: "o-1"}, "o-1")
	if err != nil {
		t.Fatal(err)
	}
	m.Headers[outboxevents.HeaderSchemaVersion] = "2"
	err = d.Publish(t.Context(), []outbox.Message{*m})[0]
	if !errors.Is(err, outboxevents.ErrNewerVersion) || outbox.IsPermanent(err) {
		t.Fatalf("newer version: %v (permanent %v); want a retryable ErrNewerVersion", err, outbox.IsPermanent(err))
	}
	m.Headers[outboxevents.HeaderType] = "orders.cancelled"
	if err := d.Publish(t.Context(), []outbox.Message{*m})[0]; !outbox.IsPermanent(err) {
		t.Fatalf("unknown type: %v; want a permanent error", err)
	}
}
