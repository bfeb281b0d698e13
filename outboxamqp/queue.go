package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
)

// Queue describes a queue for Consume, for DeclareQueue to declare: durable,
// a quorum queue unless Classic, bound to Exchange with each of Bindings.
//
// Consume keeps each key's order within one process. Several processes
// consuming one plain queue each get a share of every key (the broker hands
// deliveries round-robin), so a key's messages are applied out of order
// across them. SingleActiveConsumer keeps key order across processes: see
// docs/consumers.md, "Key order with several consumer processes".
type Queue struct {
	// Bindings are the routing keys that bind the queue to Exchange: with
	// the publisher's default routing, the topics of the messages the
	// queue takes. None: the queue is declared and left unbound.
	Bindings []string
	// Classic declares a classic queue instead of a quorum queue. Quorum
	// queues are RabbitMQ's recommended durable queue, and they count
	// deliveries (x-delivery-count), so that ConsumerConfig.MaxDeliver
	// counts attempts made before a consumer crashed.
	Classic bool
	// DeadLetterExchange, if set, receives the messages Consume parks on
	// the broker (x-dead-letter-exchange; "" is not the default exchange
	// here: to dead-letter to a queue through the default exchange, leave
	// it empty and set DeadLetterRoutingKey to the queue's name).
	DeadLetterExchange string
	// DeadLetterRoutingKey, if set, replaces the parked message's routing
	// key (x-dead-letter-routing-key).
	DeadLetterRoutingKey string
	// Exchange is the exchange to bind the queue to: the publisher's
	// Config.Exchange. It must exist. Empty with Bindings is an error (the
	// default exchange takes no bindings).
	Exchange string
	// Name is the queue's name, ConsumerConfig.Queue.
	Name string
	// SingleActiveConsumer makes the broker deliver to one consumer of the
	// queue at a time (x-single-active-consumer): the others wait, and
	// one of them takes over, with the unacknowledged messages first, when
	// the active one goes. Key order then holds across consumer
	// processes, at the cost of one process doing the queue's work; the
	// others are standbys.
	SingleActiveConsumer bool
}

// Arguments returns the queue's arguments (x-queue-type,
// x-single-active-consumer, x-dead-letter-exchange,
// x-dead-letter-routing-key), for a deployment that declares its queues by
// other means: a definitions file, or its own client.
func (q Queue) Arguments() amqp.Table {
	args := amqp.Table{"x-queue-type": "quorum"}
	if q.Classic {
		args["x-queue-type"] = "classic"
	}
	if q.SingleActiveConsumer {
		args["x-single-active-consumer"] = true
	}
	if q.DeadLetterExchange != "" || q.DeadLetterRoutingKey != "" {
		args["x-dead-letter-exchange"] = q.DeadLetterExchange
	}
	if q.DeadLetterRoutingKey != "" {
		args["x-dead-letter-routing-key"] = q.DeadLetterRoutingKey
	}
	return args
}

func (q Queue) validate() error {
	switch {
	case q.Name == "":
		return &outbox.ConfigError{Field: "outboxamqp.Queue.Name", Value: `""`, Fix: "name the queue (ConsumerConfig.Queue); a server-named queue does not outlive its connection"}
	case len(q.Name) > maxShortString:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.Name", Value: q.Name[:32] + "...", Fix: "queue names are at most 255 bytes"}
	case q.Exchange == "" && len(q.Bindings) > 0:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.Exchange", Value: `""`, Fix: "name the exchange the relay publishes to (the default exchange takes no bindings: it routes to the queue named by the routing key)"}
	}
	return nil
}

// DeclareQueue declares q on the broker at url and binds it, on a
// connection of its own that it closes before returning. Declaring is
// idempotent: a queue that exists with the same arguments is left as it is,
// messages included. One that exists with other arguments (a plain queue
// that should now have a single active consumer, a classic one declared as
// quorum) is refused by the broker with 406 PRECONDITION_FAILED, which the
// error names: RabbitMQ cannot change a queue's arguments in place; move its
// consumers to a new queue, or delete the old one once it is drained.
func DeclareQueue(ctx context.Context, url string, q Queue) error {
	if err := q.validate(); err != nil {
		return err
	}
	// amqp091 calls take no context: a past deadline on the TCP connection
	// ends whatever call the broker does not answer, handshake included.
	var (
		d    net.Dialer
		stop = func() bool { return false }
	)
	conn, err := amqp.DialConfig(url, amqp.Config{
		Dial: func(network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// As amqp.DefaultDial: the handshake gets a deadline, which
			// amqp091 clears once connected.
			_ = c.SetDeadline(time.Now().Add(DialTimeoutDefault))
			stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
			return c, nil
		},
	})
	defer stop()
	if err == nil && ctx.Err() != nil {
		_ = conn.Close()
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("outboxamqp: declare queue %s: connect: %w", q.Name, uriError(err))
	}
	defer conn.Close()
	err = declare(conn, q)
	if ctx.Err() != nil {
		return fmt.Errorf("outboxamqp: declare queue %s: %w", q.Name, ctx.Err())
	}
	return err
}

func declare(conn *amqp.Connection, q Queue) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("outboxamqp: declare queue %s: open channel: %w", q.Name, err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(q.Name, true, false, false, false, q.Arguments()); err != nil {
		var amqpErr *amqp.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
			return fmt.Errorf("outboxamqp: declare queue %s: it exists with other arguments than %v (RabbitMQ cannot change them in place: consume from a new queue, or delete this one once drained): %w", q.Name, q.Arguments(), err)
		}
		return fmt.Errorf("outboxamqp: declare queue %s: %w", q.Name, err)
	}
	for _, key := range q.Bindings {
		if err := ch.QueueBind(q.Name, key, q.Exchange, false, nil); err != nil {
			return fmt.Errorf("outboxamqp: bind queue %s to exchange %s with routing key %q: %w", q.Name, q.Exchange, key, err)
		}
	}
	return nil
}
