package e2e_test

import (
	"testing"
)

// The Redis consumer adapter's Parked tests, on each store's inbox table
// (the bodies of parked_broker_test.go, on a Redis stream).

// With Parked set to an inbox table on PostgreSQL, a Redis stream entry
// that keeps failing is parked in the consumer's database after MaxDeliver
// attempts and acknowledged (XACK, nothing pending, nothing on the park
// stream); a retry request while the handler still fails parks it again;
// once the handler is fixed, the next retry request makes the running
// consumer apply it, and its parked row is gone.
func TestRedisEntryThatKeepsFailingIsParkedInTheConsumersDatabaseAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testParkedAndRetried(t, newPGParkingDB, redisParking)
}

// The OrderPaid of order-1 is parked in the consumer's PostgreSQL database;
// the OrderCancelled of order-1 behind it is parked as waiting behind it,
// never tried, and acknowledged, while order-2 goes on; retrying the
// OrderPaid once the handler is fixed applies it, then the OrderCancelled.
func TestRedisEntryBehindAParkedOneOfItsKeyWaitsInTheConsumersDatabaseUntilThatOneIsRetried(t *testing.T) {
	t.Parallel()
	testWaitsBehindParked(t, newPGParkingDB, redisParking)
}

func TestRedisEntryThatKeepsFailingIsParkedInAMySQLInboxAcknowledgedOnlyOnceItsParkCommitsAndRetriedFromThere(t *testing.T) {
	t.Parallel()
	testParkedAndRetried(t, newMySQLParkingDB, redisParking)
}

func TestRedisEntryBehindAParkedOneOfItsKeyWaitsInAMySQLInboxUntilThatOneIsRetried(t *testing.T) {
	t.Parallel()
	testWaitsBehindParked(t, newMySQLParkingDB, redisParking)
}
