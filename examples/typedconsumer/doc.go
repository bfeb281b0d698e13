// Package typedconsumer shows typed event handlers consuming from a broker.
// A shop writes OrderPlaced and OrderPaid events to its outbox; a relay
// publishes them to NATS, Kafka or RabbitMQ; the broker's consumer adapter
// (outboxnats.Consume, outboxkafka.Consume, outboxamqp.Consume) hands each
// message to outboxevents.Dispatcher.Deliver, which decodes the event and
// runs every handler of its type once, each in a transaction of its own with
// its own inbox record.
//
// The examples (Example_nats, Example_kafka, Example_rabbitmq) share the
// shop of this package, whose code shows the events, the two handlers (a
// read model and a mailer, each over both types), the middleware and the
// SQLite tables; each example shows only what is particular to its broker:
// the publisher the relay sends with and the Consume call. The NATS and
// Kafka examples run in process with nothing to install; the RabbitMQ one
// needs a broker (TEST_AMQP_URL).
package typedconsumer
