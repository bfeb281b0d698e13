package outboxnats

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/go-outbox/outbox"
)

// OnAck makes p call f with every acknowledgement JetStream sends it. Set it
// before the first Publish.
func (p *Publisher) OnAck(f func(m *outbox.Message, ack *jetstream.PubAck)) { p.onAck = f }
