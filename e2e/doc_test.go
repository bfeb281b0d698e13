// Package e2e_test holds the end-to-end tests that need a real store and a
// real broker at once: messages committed to PostgreSQL travel through the
// relay to RabbitMQ, NATS JetStream or Kafka, and survive the broker being
// stopped and started mid-run.
//
// They live in a test-only module of their own so that the broker modules
// (outboxamqp, outboxnats, outboxkafka) need no store, and a user who picks
// SQLite and NATS finds no pgx in their module graph.
package e2e_test
