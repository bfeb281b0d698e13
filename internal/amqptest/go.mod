module github.com/go-outbox/outbox/internal/amqptest

go 1.25.0

require github.com/rabbitmq/amqp091-go v1.16.0
