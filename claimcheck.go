package outbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// BlobStore keeps the payloads that a claim check (ClaimCheck) takes out of
// messages too large for their broker. DirBlobStore is one for development;
// outboxs3 keeps them in S3 or any S3-compatible service.
//
// Put must be idempotent: the relay puts a message's payload again under the
// same key at every attempt to publish it, and two relays may put it at once
// (a lease that expired mid-publish), always with the same bytes. A reader
// sees the whole of one Put or ErrBlobNotFound, never a part. Get of a key
// never put, or deleted, returns an error matching ErrBlobNotFound. Delete of
// a missing key returns nil. An error made with Permanent says no retry can
// succeed (a payload over the store's own limit); any other is retried.
// Every method may be called from several goroutines at once.
type BlobStore interface {
	Delete(ctx context.Context, key string) error
	Get(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, data []byte) error
}

// ErrBlobNotFound is matched (errors.Is) by the error of BlobStore.Get for a
// key that holds nothing, and by the error ResolveClaimChecks returns for a
// message whose payload is missing.
var ErrBlobNotFound = errors.New("outbox: blob not found")

// HeaderClaimCheck marks a message whose payload was moved to a BlobStore by
// ClaimCheck. Its value is "key=KEY; size=N": the blob's key and the
// payload's length in bytes. One header, not two, since SQS and SNS carry at
// most 10 attributes per message. ResolveClaimChecks reads it and removes it.
const HeaderClaimCheck = "Outbox-Claim-Check"

// Defaults of ClaimCheckConfig.
const (
	// ClaimCheckPrefixDefault is the start of every blob key: one prefix
	// for one S3 lifecycle rule (or DirBlobStore.Sweep) to expire them.
	ClaimCheckPrefixDefault = "outbox-claim-check/"
	// ClaimCheckPutConcurrencyDefault is how many payloads of one batch
	// are put at once.
	ClaimCheckPutConcurrencyDefault = 8
	// ClaimCheckThresholdDefault is the largest payload sent as it is: 128
	// KiB, which SQS and SNS (256 KiB with the attributes) still carry in
	// base64 (4/3 of the size), as outboxaws sends binary payloads, and far
	// under NATS's 1 MB and Pub/Sub's 10 MB.
	ClaimCheckThresholdDefault = 128 << 10
)

// ClaimCheckConfig configures ClaimCheck. The zero value has every default.
type ClaimCheckConfig struct {
	// Prefix starts every blob key; the message id follows it. Letters,
	// digits and - _ . / only, so that the key is the same in S3, on disk
	// and in the header. Empty means ClaimCheckPrefixDefault.
	Prefix string
	// PutConcurrency is how many payloads of a batch are put at once. Zero
	// means ClaimCheckPutConcurrencyDefault.
	PutConcurrency int
	// Threshold is the largest payload, in bytes, sent as it is; a larger
	// one goes to the blob store. Zero means ClaimCheckThresholdDefault.
	Threshold int
}

// withDefaults validates c and fills its zero fields.
func (c ClaimCheckConfig) withDefaults() (ClaimCheckConfig, error) {
	bad := func(field string, value any, fix string) (ClaimCheckConfig, error) {
		return c, &ConfigError{Field: "ClaimCheckConfig." + field, Value: value, Fix: fix}
	}
	switch {
	case c.PutConcurrency < 0:
		return bad("PutConcurrency", c.PutConcurrency, fmt.Sprintf("use a positive count, or 0 for the default %d", ClaimCheckPutConcurrencyDefault))
	case c.Threshold < 0:
		return bad("Threshold", c.Threshold, fmt.Sprintf("use a positive number of bytes, or 0 for the default %d (128 KiB)", ClaimCheckThresholdDefault))
	case len(c.Prefix) > 512:
		return bad("Prefix", shorten(c.Prefix), "use at most 512 bytes: S3 keys end at 1024")
	case strings.Trim(c.Prefix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./") != "":
		return bad("Prefix", c.Prefix, "use letters, digits and - _ . / only")
	}
	if c.Prefix == "" {
		c.Prefix = ClaimCheckPrefixDefault
	}
	if c.PutConcurrency == 0 {
		c.PutConcurrency = ClaimCheckPutConcurrencyDefault
	}
	if c.Threshold == 0 {
		c.Threshold = ClaimCheckThresholdDefault
	}
	return c, nil
}

// Validate reports the first invalid field of c as a *ConfigError, or nil.
func (c ClaimCheckConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Key returns the key of the blob that holds the payload of message id, with
// c's prefix (or the default): the key ClaimCheck puts it under, and the one
// to delete when the message is discarded (DiscardDeadBlobs).
func (c ClaimCheckConfig) Key(id uuid.UUID) string {
	if c.Prefix == "" {
		return ClaimCheckPrefixDefault + id.String()
	}
	return c.Prefix + id.String()
}

// ClaimCheck returns a Publisher that sends large payloads by reference: a
// message whose payload is over cfg.Threshold is put in blobs under
// cfg.Key(message id), then handed to pub with no payload and a
// HeaderClaimCheck header naming the blob; smaller ones go to pub as they
// are. Consumers restore the payload with ResolveClaimChecks.
//
// The blob is written by the relay, just before publishing, from the payload
// kept in the outbox table: not by the Writer inside the application's
// transaction. So a blob exists only for a committed message whose publish
// was attempted; a transaction that rolls back leaves none behind (a blob put
// from the writing transaction would outlive its rollback), and a relay that
// retries puts the same bytes under the same key, leaving one blob. The
// payload stays in the table as well until the message is published, so the
// table must take it: raise WriterConfig.MaxPayloadBytes above the 1 MiB
// default for payloads larger than that.
//
// A Put that fails fails its message alone, with the blob store's error
// (retryable, or permanent if the store made it so) and the message is not
// handed to pub; the rest of the batch goes on. If pub is a KeyOrderKeeper,
// so is the returned publisher: after a failed Put, the later messages of the
// same key in the batch are held back (HeldBack), not handed to pub. A message
// written with a HeaderClaimCheck header of its own fails permanently:
// consumers would fetch a blob it names.
//
// Blobs are deleted by retention, not by consumers (a message may have several
// consumers, and a broker may deliver it again): expire them after the
// longest time a message may still be delivered, with an S3 lifecycle rule on
// the prefix, or DirBlobStore.Sweep. DiscardDeadBlobs deletes the blobs of
// dead messages as it discards them.
//
// Close closes pub. ClaimCheck returns a *ConfigError for a nil pub or blobs
// or an invalid cfg.
func ClaimCheck(pub Publisher, blobs BlobStore, cfg ClaimCheckConfig) (Publisher, error) {
	switch {
	case pub == nil:
		return nil, &ConfigError{Field: "ClaimCheck publisher", Value: "nil", Fix: "pass the publisher to wrap, e.g. a broker publisher"}
	case blobs == nil:
		return nil, &ConfigError{Field: "ClaimCheck blobs", Value: "nil", Fix: "pass a BlobStore, e.g. outbox.DirBlobStore(dir) or outboxs3.New(client, bucket)"}
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	cc := &claimCheck{pub: pub, blobs: blobs, cfg: cfg}
	if _, keeps := pub.(KeyOrderKeeper); keeps {
		return &keyOrderClaimCheck{cc}, nil
	}
	return cc, nil
}

// claimCheck is the Publisher ClaimCheck returns for a publisher that does
// not keep key order: the relay sends it a key's messages in waves.
type claimCheck struct {
	blobs BlobStore
	cfg   ClaimCheckConfig
	pub   Publisher
}

// keyOrderClaimCheck is the Publisher ClaimCheck returns for a
// KeyOrderKeeper, and is one.
type keyOrderClaimCheck struct{ *claimCheck }

// KeepsKeyOrder marks the claim check of a KeyOrderKeeper as one.
func (keyOrderClaimCheck) KeepsKeyOrder() {}

// Close closes the wrapped publisher.
func (c *claimCheck) Close() error { return c.pub.Close() }

// Publish puts the large payloads of batch in the blob store and hands the
// messages whose Put succeeded (or that needed none) to the wrapped
// publisher; see ClaimCheck.
func (c *claimCheck) Publish(ctx context.Context, batch []Message) []error {
	errs := make([]error, len(batch))
	send := make([]Message, 0, len(batch))
	at := make([]int, 0, len(batch)) // the batch index of each message of send
	checked := c.putLarge(ctx, batch, errs)
	_, keepsOrder := c.pub.(KeyOrderKeeper)
	failed := map[string]int{} // key -> batch index of its first failed Put
	for i := range batch {
		if first, held := failed[batch[i].Key]; held && keepsOrder {
			errs[i] = HeldBack(fmt.Errorf("not sent: the payload of message %s of the same key could not be stored", batch[first].ID))
			continue
		}
		if errs[i] != nil {
			if batch[i].Key != "" {
				failed[batch[i].Key] = i
			}
			continue
		}
		if m, ok := checked[i]; ok {
			send = append(send, m)
		} else {
			send = append(send, batch[i])
		}
		at = append(at, i)
	}
	if len(send) == 0 {
		return errs
	}
	results := c.pub.Publish(ctx, send)
	if len(results) != len(send) {
		err := fmt.Errorf("outbox: claim check: the wrapped publisher %T returned %d results for %d messages", c.pub, len(results), len(send))
		for _, i := range at {
			errs[i] = err
		}
		return errs
	}
	for j, i := range at {
		errs[i] = results[j]
	}
	return errs
}

// putLarge puts the payload of every message of batch over the threshold, up
// to PutConcurrency at once, and returns the messages to send in their place
// by batch index; a failure goes to errs at the message's index.
func (c *claimCheck) putLarge(ctx context.Context, batch []Message, errs []error) map[int]Message {
	checked := map[int]Message{}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		sema = make(chan struct{}, c.cfg.PutConcurrency)
	)
	for i := range batch {
		m := &batch[i]
		if name, _, own := claimCheckHeader(m.Headers); own {
			errs[i] = Permanent(fmt.Errorf("outbox: claim check: message %s was written with a %s header, which only the claim check may set: consumers would fetch the blob it names; use another header name", m.ID, name))
			continue
		}
		if len(m.Payload) <= c.cfg.Threshold {
			continue
		}
		key := c.cfg.Key(m.ID)
		wg.Go(func() {
			sema <- struct{}{}
			defer func() { <-sema }()
			err := c.blobs.Put(ctx, key, m.Payload)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs[i] = fmt.Errorf("outbox: claim check: store the %d-byte payload of message %s as blob %q: %w", len(m.Payload), m.ID, key, err)
				return
			}
			checked[i] = claimed(*m, key)
		})
	}
	wg.Wait()
	return checked
}

// claimed returns m without its payload and with the header naming the
// blob, on a copy of its headers: the relay's messages are not the
// publisher's to change.
func claimed(m Message, key string) Message {
	size := len(m.Payload)
	m.Headers = maps.Clone(m.Headers)
	if m.Headers == nil {
		m.Headers = map[string]string{}
	}
	m.Headers[HeaderClaimCheck] = "key=" + key + "; size=" + strconv.Itoa(size)
	m.Payload = nil
	return m
}
