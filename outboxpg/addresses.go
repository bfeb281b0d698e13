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
// An address is trusted only under two conditions. The row there must still
// carry the claim's token: every statement that writes a new version of a
// leased row either clears the token or replaces it (the claim of another
// worker after the lease ran out), and a slot is reused only after its row
// is gone, so a row found at a remembered address with the token is one of
// the claim's rows. And the table must not have been rewritten since the
// claim (VACUUM FULL, CLUSTER, an ALTER TABLE that rewrites, pg_repack):
// a rewrite moves every row, keeping its token, so a row of the same claim
// that was not published could land at a remembered address. The claim
// records the table's file node, which every rewrite changes, and the delete
// runs only while it is the same. Rows not found at their address are
// deleted by id (SettleAndClaim), so an address that went stale costs a
// round trip, never a message.
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
// the table's file node at the claim) and the ids it does not.
func (b *addressBook) lookUp(token uuid.UUID, ids []uuid.UUID) (tids []pgtype.TID, filenode uint32, unknown []uuid.UUID) {
	b.mu.Lock()
	c, ok := b.claims[token]
	b.mu.Unlock()
	if !ok {
		return nil, 0, ids
	}
	for _, id := range ids {
		if tid, ok := c.at[id]; ok {
			tids = append(tids, tid)
		} else {
			unknown = append(unknown, id)
		}
	}
	return tids, c.filenode, unknown
}

// forget drops a claim once its settlement is recorded.
func (b *addressBook) forget(token uuid.UUID) {
	b.mu.Lock()
	delete(b.claims, token)
	b.mu.Unlock()
}
