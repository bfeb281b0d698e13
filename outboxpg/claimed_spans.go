package outboxpg

import (
	"bytes"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// An open claim's rows stay pending to every other transaction until it
// commits, and they are the first entries of the pending index, where the
// next claim starts reading: without help, each worker's claim would
// fetch, and try to lock, every row the other workers' open claims hold,
// and then the rows their last claims deleted, which stay in the index
// until no transaction older than those deletes is left (and the other
// workers' open claims are such transactions). Each added worker made
// every claim read a batch or two more, measured at about twice the
// entries per message with two workers and four to five times with four
// (BenchmarkRelayDrainWorkers' visited/msg).
//
// A Store knows which part of the index its own claims took: a claimed
// span, the first and last (available_at, id) of a claim's rows. An
// unordered claim with transaction leases passes over the spans of the
// store's other open claims and of its claims settled while one of them
// was open (their rows deleted, but not yet removable), in three parts
// read in turn, each only if the previous ones left places:
//
//  1. before: the rows before the first span, from the head of the index;
//  2. after: the rows after the last span;
//  3. within: the rows between, which the spans' claims did not take
//     (held by others when they were read, or committed later with an
//     earlier due time).
//
// The three parts cover every due row, so a claim still comes back full
// whenever enough is free. A free row within the spans waits, while the
// other parts fill the batch, until the spans around it are dropped: a
// span is dropped when its claim ends with rows put back (they are free
// again) and, once settled, as soon as every open claim of the store began
// after the settlement, which is a batch or two later; and any span once
// the store has made a few claims since (see passOver).

// indexKey is a row's place in the pending index.
type indexKey struct {
	at time.Time
	id uuid.UUID
}

func (k indexKey) less(o indexKey) bool {
	if c := k.at.Compare(o.at); c != 0 {
		return c < 0
	}
	return bytes.Compare(k.id[:], o.id[:]) < 0
}

// claimedSpan is the first and last place of a claim's rows in the
// pending index.
type claimedSpan struct {
	first, last indexKey
}

// spanOf returns the span of msgs (sorted by due time, then id) that lie
// after after (all of them if after is nil), and whether there are any.
func spanOf(msgs []outbox.Message, after *indexKey) (claimedSpan, bool) {
	var sp claimedSpan
	found := false
	for _, m := range msgs {
		k := indexKey{at: m.AvailableAt, id: m.ID}
		if after != nil && !after.less(k) {
			continue
		}
		if !found {
			sp.first, found = k, true
		}
		sp.last = k
	}
	return sp, found
}

// claimedSpans are a Store's spans of claims settled but not yet
// removable (see above); the spans of open claims are kept with them
// (openClaim.span).
type claimedSpans struct {
	mu      sync.Mutex
	claims  uint64 // the claims opened so far, numbering them
	settled []settledSpan
}

// settledSpan is the span of a claim that was settled when claims
// claims had been opened.
type settledSpan struct {
	span   claimedSpan
	claims uint64
}

// opened numbers a new open claim.
func (c *claimedSpans) opened() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.claims++
	return c.claims
}

// settle keeps the span of a claim that commits with every row it deleted
// published or dead.
func (c *claimedSpans) settle(span claimedSpan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settled = append(c.settled, settledSpan{span: span, claims: c.claims})
}

// passOver returns the first and last place of the spans a claim of s
// passes over, and false if there are none: those of s's open claims and
// of the claims settled since the oldest of them began, among the store's
// last claims (two for each open claim, and two); the others are dropped.
// The bound keeps a free row within the spans from waiting behind a claim
// that stays open long (a publisher that stalls until its lease ends)
// while the other workers keep finding work after the spans.
func (c *claimedSpans) passOver(s *Store) (claimedSpan, bool) {
	type openSpan struct {
		span   claimedSpan
		opened uint64
	}
	var open []openSpan
	allOpenClaims.mu.Lock()
	for _, claim := range allOpenClaims.claims {
		if claim.store == s && claim.span != nil {
			open = append(open, openSpan{span: *claim.span, opened: claim.opened})
		}
	}
	allOpenClaims.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	recent := func(claims uint64) bool { return claims+2*uint64(len(open))+2 > c.claims }
	oldest := ^uint64(0)
	var spans []claimedSpan
	for _, o := range open {
		if recent(o.opened) {
			spans = append(spans, o.span)
			oldest = min(oldest, o.opened)
		}
	}
	kept := c.settled[:0]
	for _, st := range c.settled {
		if st.claims >= oldest && recent(st.claims) {
			kept = append(kept, st)
			spans = append(spans, st.span)
		}
	}
	clear(c.settled[len(kept):])
	c.settled = kept
	if len(spans) == 0 {
		return claimedSpan{}, false
	}
	hull := spans[0]
	for _, sp := range spans[1:] {
		if sp.first.less(hull.first) {
			hull.first = sp.first
		}
		if hull.last.less(sp.last) {
			hull.last = sp.last
		}
	}
	return hull, true
}

// putsBackPending reports whether settling claim with settle puts rows
// back pending: then they are free again within its span.
func putsBackPending(claim *openClaim, settle outboxdriver.Settlement) bool {
	if len(settle.Retry) > 0 || len(settle.Release) > 0 {
		return true
	}
	return len(settle.Published)+len(settle.Dead) < len(claim.rows)
}

// claimPastSpans is the unordered claim with transaction leases that
// passes over claimed spans: $1 limit, $2 and $3 the first span's first
// place, $4 and $5 the last one's last place. Each part is read only when
// the parts before it left places (LIMIT 0 reads nothing); the parts do
// not overlap, so no row is locked twice.
func claimPastSpans(n names) string {
	part := func(name, where, limit string) string {
		return name + ` AS MATERIALIZED (
	SELECT ctid FROM {t} AS o
	WHERE status = 'pending' AND available_at <= now()
		AND (locked_until IS NULL OR locked_until <= now())
		AND ` + where + `
	ORDER BY available_at, id
	LIMIT ` + limit + `
	FOR UPDATE SKIP LOCKED
)`
	}
	const first, last = `($2::timestamptz, $3::uuid)`, `($4::timestamptz, $5::uuid)`
	q := `WITH ` + part("before", `(available_at, id) < `+first, `$1`) + `,
` + part("after", `(available_at, id) > `+last, `$1 - (SELECT count(*) FROM before)`) + `,
` + part("within", `(available_at, id) BETWEEN `+first+` AND `+last,
		`$1 - (SELECT count(*) FROM before) - (SELECT count(*) FROM after)`) + `
DELETE FROM {t} AS t
WHERE t.ctid = ANY(ARRAY(SELECT ctid FROM before UNION ALL SELECT ctid FROM after UNION ALL SELECT ctid FROM within))
RETURNING ` + messageColumns + `, t.` + claimedColumns
	return strings.ReplaceAll(q, "{t}", n.qTable)
}

// claimArgs are the arguments of claimPastSpans.
func (sp claimedSpan) claimArgs(limit int) []any {
	return []any{limit, sp.first.at, pgtype.UUID{Bytes: sp.first.id, Valid: true}, sp.last.at, pgtype.UUID{Bytes: sp.last.id, Valid: true}}
}
