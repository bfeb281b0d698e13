package outboxamqp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/go-outbox/outbox"
)

// Queue describes a queue for Consume, for DeclareQueue to declare: durable,
// a quorum queue unless Classic, bound to Exchange with each of Bindings;
// Exchange, DeadLetterExchange and DeadLetterQueue are declared with it.
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
	// it empty and set DeadLetterQueue, or DeadLetterRoutingKey to the
	// queue's name). DeclareQueue declares it as it declares Exchange,
	// since the broker drops what it dead-letters to a missing exchange.
	DeadLetterExchange string
	// DeadLetterQueue, if set, is declared to keep the parked messages
	// (durable, quorum unless Classic). They reach it with
	// DeadLetterRoutingKey, which defaults to this name: through
	// DeadLetterExchange, to which it is bound with that key, or, with no
	// DeadLetterExchange, straight through the default exchange.
	DeadLetterQueue string
	// DeadLetterRoutingKey, if set, replaces the parked message's routing
	// key (x-dead-letter-routing-key). Default with DeadLetterQueue: its
	// name.
	DeadLetterRoutingKey string
	// Exchange is the exchange to bind the queue to: the publisher's
	// Config.Exchange. DeclareQueue declares it if it is missing (durable,
	// of ExchangeType). Empty with Bindings is an error (the default
	// exchange takes no bindings).
	Exchange string
	// ExchangeType is the type Exchange and DeadLetterExchange are
	// declared with when missing. Empty: topic, and an exchange that
	// exists is used whatever its type. Set, an exchange that exists with
	// another type is an error (RabbitMQ cannot change it in place).
	// Exchanges named amq.* are the broker's own: they are only looked up.
	ExchangeType string
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
	args := amqp.Table{"x-queue-type": q.queueType()}
	if q.SingleActiveConsumer {
		args["x-single-active-consumer"] = true
	}
	if q.DeadLetterExchange != "" || q.DeadLetterRoutingKey != "" || q.DeadLetterQueue != "" {
		args["x-dead-letter-exchange"] = q.DeadLetterExchange
	}
	if key := q.deadLetterKey(); key != "" {
		args["x-dead-letter-routing-key"] = key
	}
	return args
}

// deadLetterKey is the routing key parked messages are dead-lettered with,
// "" for their own.
func (q Queue) deadLetterKey() string {
	if q.DeadLetterRoutingKey == "" {
		return q.DeadLetterQueue
	}
	return q.DeadLetterRoutingKey
}

// queueType is x-queue-type of q and of its DeadLetterQueue.
func (q Queue) queueType() string {
	if q.Classic {
		return "classic"
	}
	return "quorum"
}

func (q Queue) validate() error {
	switch {
	case q.Name == "":
		return &outbox.ConfigError{Field: "outboxamqp.Queue.Name", Value: `""`, Fix: "name the queue (ConsumerConfig.Queue); a server-named queue does not outlive its connection"}
	case len(q.Name) > maxShortString:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.Name", Value: q.Name[:32] + "...", Fix: "queue names are at most 255 bytes"}
	case q.Exchange == "" && len(q.Bindings) > 0:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.Exchange", Value: `""`, Fix: "name the exchange the relay publishes to (the default exchange takes no bindings: it routes to the queue named by the routing key)"}
	case len(q.DeadLetterQueue) > maxShortString:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.DeadLetterQueue", Value: q.DeadLetterQueue[:32] + "...", Fix: "queue names are at most 255 bytes"}
	case q.DeadLetterQueue == q.Name:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.DeadLetterQueue", Value: q.DeadLetterQueue, Fix: "name another queue than the one consumed: parked messages would come back to it"}
	case q.DeadLetterQueue != "" && q.DeadLetterExchange == "" && q.deadLetterKey() != q.DeadLetterQueue:
		return &outbox.ConfigError{Field: "outboxamqp.Queue.DeadLetterRoutingKey", Value: q.DeadLetterRoutingKey,
			Fix: "without DeadLetterExchange the default exchange routes parked messages by queue name: leave DeadLetterRoutingKey empty, or set DeadLetterExchange"}
	}
	return nil
}

// What Declare did with each object, in Declared.Action.
const (
	// ActionBound: the binding is in place (the broker does not say
	// whether it was already).
	ActionBound = "bound"
	// ActionCreated: the exchange or queue did not exist and was created.
	ActionCreated = "created"
	// ActionExists: the exchange or queue existed, as declared, and was
	// left as it is.
	ActionExists = "exists"
)

// Declared is what Declare did with one exchange, queue or binding.
type Declared struct {
	// Action is ActionCreated, ActionExists or ActionBound.
	Action string
	// Kind is "exchange", "queue" or "binding".
	Kind string
	// Name names the object; a binding as "queue <- exchange (routing key)".
	Name string
}

// DeclareQueue declares q on the broker at url and binds it, on a
// connection of its own that it closes before returning: Exchange (if
// missing), DeadLetterExchange and DeadLetterQueue first, then the queue and
// its bindings. Declaring is idempotent: a queue that exists with the same
// arguments is left as it is, messages included. One that exists with other
// arguments (a plain queue that should now have a single active consumer, a
// classic one declared as quorum) is refused by the broker with 406
// PRECONDITION_FAILED, which the error names: RabbitMQ cannot change a
// queue's arguments in place; move its consumers to a new queue, or delete
// the old one once it is drained. Likewise for an exchange of another type
// than a set ExchangeType.
func DeclareQueue(ctx context.Context, url string, q Queue) error {
	_, err := Declare(ctx, url, q)
	return err
}

// Declare is DeclareQueue, and also says what it found and made, in the
// order it declared them (what the outbox CLI's topology apply prints).
func Declare(ctx context.Context, url string, q Queue) ([]Declared, error) {
	if err := q.validate(); err != nil {
		return nil, err
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
		return nil, fmt.Errorf("outboxamqp: declare queue %s: connect: %w", q.Name, uriError(err))
	}
	defer conn.Close()
	dc := &declarer{conn: conn}
	err = dc.declare(q)
	if ctx.Err() != nil {
		return dc.done, fmt.Errorf("outboxamqp: declare queue %s: %w", q.Name, ctx.Err())
	}
	return dc.done, err
}

// declarer declares on conn, a channel per step: a refusal closes the
// channel it came on, and a passive declare of a missing object is one.
type declarer struct {
	conn *amqp.Connection
	done []Declared
}

func (dc *declarer) declare(q Queue) error {
	if q.Exchange != "" {
		if err := dc.exchange(q.Exchange, q.ExchangeType); err != nil {
			return err
		}
	}
	if q.DeadLetterExchange != "" {
		if err := dc.exchange(q.DeadLetterExchange, q.ExchangeType); err != nil {
			return err
		}
	}
	if q.DeadLetterQueue != "" {
		if err := dc.queue("dead-letter queue", q.DeadLetterQueue, amqp.Table{"x-queue-type": q.queueType()}); err != nil {
			return err
		}
		if q.DeadLetterExchange != "" {
			if err := dc.bind(q.DeadLetterQueue, q.DeadLetterExchange, q.deadLetterKey()); err != nil {
				return err
			}
		}
	}
	if err := dc.queue("queue", q.Name, q.Arguments()); err != nil {
		return err
	}
	for _, key := range q.Bindings {
		if err := dc.bind(q.Name, q.Exchange, key); err != nil {
			return err
		}
	}
	return nil
}

// with runs f on a channel of its own.
func (dc *declarer) with(f func(ch *amqp.Channel) error) error {
	ch, err := dc.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	defer ch.Close()
	return f(ch)
}

// exists reports whether the passive declare check finds its object.
func (dc *declarer) exists(check func(ch *amqp.Channel) error) (bool, error) {
	err := dc.with(check)
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.NotFound {
		return false, nil
	}
	return err == nil, err
}

func (dc *declarer) exchange(name, kind string) error {
	found, err := dc.exists(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
	})
	switch {
	case err != nil:
		return fmt.Errorf("outboxamqp: declare exchange %s: %w", name, err)
	case strings.HasPrefix(name, "amq.") && !found:
		return fmt.Errorf("outboxamqp: exchange %s not found: names beginning with amq. are reserved for the broker's own exchanges, which cannot be declared; use another name", name)
	case found && (kind == "" || strings.HasPrefix(name, "amq.")):
		dc.done = append(dc.done, Declared{Action: ActionExists, Kind: "exchange", Name: name})
		return nil
	}
	declared := cmp.Or(kind, amqp.ExchangeTopic)
	err = dc.with(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(name, declared, true, false, false, false, nil)
	})
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		return fmt.Errorf("outboxamqp: declare exchange %s: it exists with another type or durability than a durable %s exchange "+
			"(RabbitMQ cannot change them in place: set ExchangeType to its type, or leave ExchangeType empty to use it as it is): %w", name, declared, err)
	}
	if err != nil {
		return fmt.Errorf("outboxamqp: declare exchange %s: %w", name, err)
	}
	dc.done = append(dc.done, Declared{Action: action(found), Kind: "exchange", Name: name})
	return nil
}

func (dc *declarer) queue(kind, name string, args amqp.Table) error {
	found, err := dc.exists(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("outboxamqp: declare %s %s: %w", kind, name, err)
	}
	err = dc.with(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(name, true, false, false, false, args)
		return err
	})
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp.PreconditionFailed {
		return fmt.Errorf("outboxamqp: declare %s %s: it exists with other arguments than %v (RabbitMQ cannot change them in place: consume from a new queue, or delete this one once drained): %w", kind, name, args, err)
	}
	if err != nil {
		return fmt.Errorf("outboxamqp: declare %s %s: %w", kind, name, err)
	}
	dc.done = append(dc.done, Declared{Action: action(found), Kind: "queue", Name: name})
	return nil
}

func (dc *declarer) bind(queue, exchange, key string) error {
	if err := dc.with(func(ch *amqp.Channel) error { return ch.QueueBind(queue, key, exchange, false, nil) }); err != nil {
		return fmt.Errorf("outboxamqp: bind queue %s to exchange %s with routing key %q: %w", queue, exchange, key, err)
	}
	dc.done = append(dc.done, Declared{Action: ActionBound, Kind: "binding", Name: fmt.Sprintf("%s <- %s (%s)", queue, exchange, key)})
	return nil
}

func action(found bool) string {
	if found {
		return ActionExists
	}
	return ActionCreated
}
