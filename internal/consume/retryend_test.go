package consume

import "github.com/go-outbox/outbox/storetest"

// The inbox tables pass storetest's parked cases: a retryEnd that drifted
// from them would leave them out of it, unseen, and a retry would fall
// back to the plain ParkStore's end.
var _ retryEnd = storetest.ParkedTable(nil)
