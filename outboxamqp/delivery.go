package outboxamqp

import (
	"fmt"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
)

// FromDelivery turns a message a consumer received back into the outbox
// message the publisher sent: ID from the message-id property, Topic from
// the type property (the routing key if it has none), Key from HeaderKey,
// Headers from the headers and the content-type property (as
// ContentTypeHeader), Payload from the body, CreatedAt from the timestamp
// (AMQP keeps whole seconds). Header values that are not strings are
// formatted with fmt. It fails if the message id is not a UUID, as for a
// message some other publisher sent.
func FromDelivery(d amqp.Delivery) (outbox.Message, error) {
	id, err := uuid.Parse(d.MessageId)
	if err != nil {
		return outbox.Message{}, fmt.Errorf("outboxamqp: delivery %d has message id %q, not an outbox message id", d.DeliveryTag, d.MessageId)
	}
	m := outbox.Message{
		ID:        id,
		Topic:     d.Type,
		Payload:   d.Body,
		CreatedAt: d.Timestamp,
	}
	if m.Topic == "" {
		m.Topic = d.RoutingKey
	}
	if len(d.Headers) > 0 || d.ContentType != "" {
		m.Headers = make(map[string]string, len(d.Headers)+1)
	}
	for k, v := range d.Headers {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case []byte:
			s = string(v)
		default:
			s = fmt.Sprint(v)
		}
		if k == HeaderKey {
			m.Key = s
			continue
		}
		m.Headers[k] = s
	}
	if d.ContentType != "" {
		m.Headers[ContentTypeHeader] = d.ContentType
	}
	return m, nil
}
