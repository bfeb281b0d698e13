module github.com/go-outbox/outbox/outboxamqp

go 1.25.0

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/amqptest v0.0.0-00010101000000-000000000000
	github.com/google/uuid v1.6.0
	github.com/rabbitmq/amqp091-go v1.16.0
)

replace github.com/go-outbox/outbox => ..

replace github.com/go-outbox/outbox/internal/amqptest => ../internal/amqptest
