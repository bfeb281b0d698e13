package outbox

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
)

// ResolveClaimChecks returns a consumer adapter's handler that gives fn every
// message whole: for a message with a HeaderClaimCheck header (sent through
// ClaimCheck), it gets the payload from blobs, puts it back in the message
// and removes the header before calling fn; any other message goes to fn as
// it came.
//
// A missing blob (the blob store lags behind, or retention deleted it) fails
// the message with an error matching ErrBlobNotFound, retryable: the adapter
// redelivers it and, after its MaxDeliver, parks it like any other failure. A
// header that is not "key=KEY; size=N" fails permanently, and so does a blob
// of another length than the header says (a blob put under the same key by
// another outbox). fn is not called in any of those cases.
//
// Wrap the inbox's handler, not the other way round, so that the payload is
// fetched before the inbox's transaction begins and no database
// transaction stays open during the fetch:
//
//	outboxnats.Consume(ctx, js, cfg, outbox.ResolveClaimChecks(blobs, outbox.ApplyOnce(inbox, apply)))
//
// A duplicate is then fetched again before the inbox skips it, so blobs must
// outlive the last redelivery of their message (see ClaimCheck on retention).
// ResolveClaimChecks never deletes a blob: other consumers may still need it.
func ResolveClaimChecks(blobs BlobStore, fn func(ctx context.Context, m Message) error) func(ctx context.Context, m Message) error {
	return func(ctx context.Context, m Message) error {
		name, value, ok := claimCheckHeader(m.Headers)
		if !ok {
			return fn(ctx, m)
		}
		key, size, err := parseClaimCheck(value)
		if err != nil {
			return Permanent(fmt.Errorf("outbox: message %s: header %s %q: %w", m.ID, name, value, err))
		}
		payload, err := blobs.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("outbox: message %s: get its %d-byte payload from blob %q: %w", m.ID, size, key, err)
		}
		if len(payload) != size {
			return Permanent(fmt.Errorf("outbox: message %s: blob %q holds %d bytes, the header %s says %d: it is not this message's payload", m.ID, key, len(payload), name, size))
		}
		m.Payload = payload
		m.Headers = maps.Clone(m.Headers)
		delete(m.Headers, name)
		return fn(ctx, m)
	}
}

// claimCheckHeader returns the name and value of the claim check header of
// h: by its exact name, or in any case, since transports such as HTTP and
// AMQP may change the case of header names.
func claimCheckHeader(h map[string]string) (name, value string, ok bool) {
	if v, found := h[HeaderClaimCheck]; found {
		return HeaderClaimCheck, v, true
	}
	for n, v := range h {
		if strings.EqualFold(n, HeaderClaimCheck) {
			return n, v, true
		}
	}
	return "", "", false
}

// parseClaimCheck reads a HeaderClaimCheck value: "key=KEY; size=N".
func parseClaimCheck(value string) (key string, size int, err error) {
	size = -1
	for part := range strings.SplitSeq(value, ";") {
		name, v, found := strings.Cut(strings.TrimSpace(part), "=")
		if !found {
			return "", 0, fmt.Errorf("%q is not name=value", part)
		}
		switch name {
		case "key":
			key = v
		case "size":
			if size, err = strconv.Atoi(v); err != nil || size < 0 {
				return "", 0, fmt.Errorf("size %q is not a byte count", v)
			}
		}
	}
	switch {
	case key == "":
		return "", 0, fmt.Errorf("no key")
	case size < 0:
		return "", 0, fmt.Errorf("no size")
	}
	return key, size, nil
}
