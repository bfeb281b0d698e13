package outboxpg

import (
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// addressBook remembers where the rows each claim leased are stored (their
// ctid, as the claim's UPDATE left them), so that deleting the published
// ones finds each row by its address, a TID scan, instead of descending the
// primary key and following the row's update chain: measured at about half
// the cost for 1,000 rows.
//
// A row found at a remembered address is deleted only if it still carries
// the claim's token and its id is one of those settled as published: the
// token alone does not prove which row of the claim sits there. An UPDATE
// that leaves the lease columns alone (an operator rescheduling messages,
// say) writes a new version of a leased row that keeps the token, and once
// VACUUM or page pruning frees the old version's slot, a later version of
// another row of the same claim may be written at that address
// (TestSettlementAfterAnOperatorUpdateAndVacuumDeletesOnlyThePublishedRows).
// Any row with the token and a published id may go, wherever it sits.
//
// The claim also records the table's file node, and the delete by address
// runs only while it is the same: a rewrite (VACUUM FULL, CLUSTER, an ALTER
// TABLE that rewrites, pg_repack) moves every row, so the addresses mean
// nothing after one. Rows not found at their address are deleted by id
// (SettleAndClaim), so an address that went stale costs a round trip, never
// a message.
type addressBook struct {
	mu     sync.Mutex
	claims map[uuid.UUID]claimAddresses
}

// claimAddresses are the addresses of one claim's rows.
type claimAddresses struct {
	filenode uint32
	at       map[uuid.UUID]pgtype.TID
	// forgetAfter is when a claim that was never settled is dropped: the
	// relay settles a batch within its lease, and a settlement that comes
	// later still works, by id.
	forgetAfter time.Time
}

// remember records where a claim's rows are.
func (b *addressBook) remember(token uuid.UUID, lease time.Duration, filenode uint32, at map[uuid.UUID]pgtype.TID) {
	if len(at) == 0 {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.claims == nil {
		b.claims = map[uuid.UUID]claimAddresses{}
	}
	for t, c := range b.claims {
		if now.After(c.forgetAfter) {
			delete(b.claims, t)
		}
	}
	b.claims[token] = claimAddresses{filenode: filenode, at: at, forgetAfter: now.Add(2 * lease)}
}

// lookUp splits ids, settled under token, into the addresses it knows (with
// their ids, and the table's file node at the claim) and the ids it does not.
func (b *addressBook) lookUp(token uuid.UUID, ids []uuid.UUID) (tids []pgtype.TID, addressed []uuid.UUID, filenode uint32, unknown []uuid.UUID) {
	b.mu.Lock()
	c, ok := b.claims[token]
	b.mu.Unlock()
	if !ok {
		return nil, nil, 0, ids
	}
	for _, id := range ids {
		if tid, ok := c.at[id]; ok {
			tids = append(tids, tid)
			addressed = append(addressed, id)
		} else {
			unknown = append(unknown, id)
		}
	}
	return tids, addressed, c.filenode, unknown
}

// forget drops a claim once its settlement is recorded.
func (b *addressBook) forget(token uuid.UUID) {
	b.mu.Lock()
	delete(b.claims, token)
	b.mu.Unlock()
}
