package e2e_test

import (
	"testing"

	"github.com/google/uuid"
)

// The parking tests on PostgreSQL: each adapter, on its broker, with an
// inbox table of outboxpg (consumerDB, parked_test.go); the bodies are
// shared with MySQL's (parked_stores_test.go, parked_mysql_test.go).

// newPGParkingDB is newParkingDB on PostgreSQL.
func newPGParkingDB(t *testing.T, consumer string, poison uuid.UUID) parkingDB {
	return newConsumerDB(t, consumer, poison)
}

// With Parked set to an inbox table on PostgreSQL, a JetStream message that
// keeps failing is parked in the consumer's database after MaxDeliver
// attempts and acknowledged on the server (not terminated, nothing awaiting
// acknowledgement); a retry request while the handler still fails parks it
// again with the new attempts; once the handler is fixed, the next retry
// request makes the running consumer apply it, and its parked row is gone,
// after exactly MaxDeliver attempts and two rounds of retries.
func TestNATSMessageThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testParkedAndRetried(t, newPGParkingDB, natsParking)
}

// Issue 24, defect 7: the OrderPaid of order-1 is parked in the consumer's
// database; the OrderCancelled of order-1 behind it must not be applied
// before it (the read model would say paid while the order is cancelled):
// it is parked as waiting behind it and acknowledged, while order-2 goes
// on. Once the handler is fixed, retrying the OrderPaid applies it, then
// the OrderCancelled, and nothing stays parked. Before the fix the
// OrderCancelled was applied at once.
func TestNATSMessageBehindAParkedOneOfItsKeyWaitsInTheConsumersDatabaseUntilThatOneIsRetried(t *testing.T) {
	t.Parallel()
	testWaitsBehindParked(t, newPGParkingDB, natsParking)
}

// With Parked set to an inbox table on PostgreSQL, a RabbitMQ message that
// keeps failing is parked in the consumer's database after MaxDeliver
// attempts and acknowledged on the broker (not in the queue's dead-letter
// exchange, not requeued when the consumer stops); once the handler is
// fixed, an operator's retry request makes the running consumer apply it,
// and its parked row is gone, after exactly MaxDeliver attempts and the
// retry.
func TestRabbitMQMessageThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testRabbitMQParkedAndRetried(t, newPGParkingDB)
}

// With Parked set to an inbox table on PostgreSQL (and no dead-letter
// topic), a Kafka record that keeps failing is parked in the consumer's
// database after MaxDeliver attempts and its offset committed: the next
// member of the group does not get it again; once the handler is fixed, an
// operator's retry request makes the running member apply it, and its parked
// row is gone.
func TestKafkaRecordThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testKafkaParkedAndRetried(t, newPGParkingDB)
}
