module github.com/go-outbox/outbox/outboxamqp

go 1.25.0

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/amqptest v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/outboxpg v0.0.0-00010101000000-000000000000
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
	github.com/rabbitmq/amqp091-go v1.16.0
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	golang.org/x/sync v0.22.0 // indirect
	golang.org/x/text v0.41.0 // indirect
)

replace github.com/go-outbox/outbox => ..

replace github.com/go-outbox/outbox/internal/amqptest => ../internal/amqptest

replace github.com/go-outbox/outbox/internal/pgtest => ../internal/pgtest

replace github.com/go-outbox/outbox/outboxpg => ../outboxpg
