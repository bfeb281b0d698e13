package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxs3"
)

const (
	// claimCheckFlagUsage is the help of --claim-check, the same for every
	// command that takes it.
	claimCheckFlagUsage = "the claim check's blob store, as the relay's: s3://BUCKET/PREFIX (?region=R&endpoint=URL&path_style=true) " +
		"or file:DIR (?prefix=P); payloads over ?threshold=BYTES (default 131072) go there, the message carries a reference (docs/claim-check.md)"
	// claimCheckDirRetentionDefault is how long a relay keeps the blobs of
	// a file: store by default: S3 has lifecycle rules, a directory has
	// the relay's sweep. As long as a parked message may wait for a retry.
	claimCheckDirRetentionDefault = 30 * 24 * time.Hour
	// claimCheckDirRetentionMin is the shortest ?retention= taken: a blob
	// must outlive every delivery of its message, retries included.
	claimCheckDirRetentionMin = time.Hour
	// claimCheckSweepInterval is how often the relay sweeps a file: store.
	claimCheckSweepInterval = time.Hour
	// claimCheckCheckTimeout bounds the check of the blob store at start.
	claimCheckCheckTimeout = 30 * time.Second
)

// claimCheck is a parsed --claim-check URL: where blobs go and the
// configuration the relay's ClaimCheck and the discards share (the prefix
// decides each blob's key).
type claimCheck struct {
	blobs outbox.BlobStore
	cfg   outbox.ClaimCheckConfig
	// dir is the directory of a file: store, which the relay sweeps
	// after retention; "" for S3.
	dir       string
	retention time.Duration
}

// openClaimCheck parses a --claim-check URL and checks that its store can
// be reached: the bucket exists and the credentials reach it, or the
// directory exists (made, when create is set: the relay writes there). An
// empty raw is no claim check (nil).
func openClaimCheck(ctx context.Context, raw string, create bool) (*claimCheck, error) {
	if raw == "" {
		return nil, nil
	}
	rememberSecret(raw)
	u, err := url.Parse(raw)
	if err != nil {
		return nil, usagef("--claim-check %q: %v", redact(raw), err)
	}
	// A parameter may be a URL with a password (?endpoint=): remember it
	// before any error quotes raw.
	for _, values := range u.Query() {
		for _, v := range values {
			rememberSecret(v)
		}
	}
	cc := &claimCheck{retention: claimCheckDirRetentionDefault}
	q, err := strictQuery(u)
	if err == nil {
		cc.cfg.Threshold, err = queryInt(q, "threshold")
	}
	if err != nil {
		return nil, usagef("--claim-check %q: %v", redact(raw), err)
	}
	switch strings.ToLower(u.Scheme) {
	case "s3":
		err = cc.openS3(ctx, u, q)
	case "file":
		err = cc.openDir(u, q, create)
	default:
		return nil, usagef("--claim-check %q: unknown scheme %q; use s3://BUCKET/PREFIX or file:DIR", redact(raw), u.Scheme)
	}
	if err != nil {
		return nil, fmt.Errorf("--claim-check %q: %w", redact(raw), err)
	}
	if err := cc.cfg.Validate(); err != nil {
		return nil, usagef("--claim-check %q: %v", redact(raw), err)
	}
	return cc, nil
}

// openS3 opens the bucket of an s3://BUCKET/PREFIX URL: the path is the
// blobs' prefix as it is (s3://b/claims/ puts claims/ID).
func (cc *claimCheck) openS3(ctx context.Context, u *url.URL, q url.Values) error {
	if err := onlyParams(q, "threshold", "region", "endpoint", "path_style"); err != nil {
		return usageError{err}
	}
	switch {
	case u.Host == "":
		return usageError{fmt.Errorf("no bucket: use s3://BUCKET/PREFIX")}
	case u.User != nil:
		return usageError{fmt.Errorf("credentials in the URL: remove them; the S3 client takes them from the SDK's chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, the role)")}
	}
	cfg := outboxs3.Config{Region: q.Get("region"), Endpoint: q.Get("endpoint")}
	if cfg.Endpoint != "" {
		e, err := url.Parse(cfg.Endpoint)
		switch {
		case err != nil || e.Scheme != "http" && e.Scheme != "https" || e.Host == "":
			return usageError{fmt.Errorf("endpoint: use the service's base URL, e.g. endpoint=http://localhost:9000")}
		case e.User != nil:
			if p, ok := e.User.Password(); ok {
				secrets.add(p) // in every escaped form, as it may stand in raw
			}
			return usageError{fmt.Errorf("credentials in the endpoint: remove them; the S3 client takes them from the SDK's chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, the role)")}
		}
	}
	if v := q.Get("path_style"); v != "" {
		var err error
		if cfg.PathStyle, err = strconv.ParseBool(v); err != nil {
			return usageError{fmt.Errorf("path_style=%q: use true or false", v)}
		}
	}
	cc.cfg.Prefix = strings.TrimPrefix(u.Path, "/")
	store, err := outboxs3.Open(ctx, u.Host, cfg)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, claimCheckCheckTimeout)
	defer cancel()
	if err := store.Check(cctx); err != nil {
		return err
	}
	cc.blobs = store
	return nil
}

// openDir opens the directory of a file:DIR (or file:///DIR) URL.
func (cc *claimCheck) openDir(u *url.URL, q url.Values, create bool) error {
	if err := onlyParams(q, "threshold", "prefix", "retention"); err != nil {
		return usageError{err}
	}
	if u.Host != "" && u.Host != "localhost" {
		return usageError{fmt.Errorf("host %q: a file: URL names a directory of this machine: file:DIR, file:/ABSOLUTE/DIR or file:///ABSOLUTE/DIR", u.Host)}
	}
	dir := u.Opaque
	if dir == "" {
		dir = u.Path
	}
	if dir == "" {
		return usageError{fmt.Errorf("no directory: use file:DIR or file:///ABSOLUTE/DIR")}
	}
	cc.cfg.Prefix = q.Get("prefix")
	if v := q.Get("retention"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < claimCheckDirRetentionMin {
			return usageError{fmt.Errorf("retention=%q: use a duration of at least %v, longer than a message may wait to be delivered or retried, e.g. 720h", v, claimCheckDirRetentionMin)}
		}
		cc.retention = d
	}
	if create {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("make the blob directory: %w", err)
		}
	} else if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		// A discard would delete nothing there, without a word.
		return fmt.Errorf("no blob directory %s: give the relay's --claim-check", dir)
	}
	cc.blobs, cc.dir = outbox.DirBlobStore(dir), dir
	return nil
}

// strictQuery returns the parameters of u, refusing what url.Query would
// drop without a word: a pair that does not parse, a parameter given
// twice, a fragment.
func strictQuery(u *url.URL) (url.Values, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query does not parse (%v): separate parameters with &, percent-encode %% and &", err)
	}
	for name, values := range q {
		if len(values) > 1 {
			return nil, fmt.Errorf("parameter %q given %d times: give it once", name, len(values))
		}
	}
	if u.Fragment != "" {
		return nil, fmt.Errorf("unexpected #%s: remove it, or percent-encode # as %%23", u.Fragment)
	}
	return q, nil
}

// queryInt reads the positive integer parameter name of q; 0 when absent.
func queryInt(q url.Values, name string) (int, error) {
	v, ok := q[name]
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(v[0])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: use a positive number of bytes, e.g. %d (leave it out for that default)", name, v[0], outbox.ClaimCheckThresholdDefault)
	}
	return n, nil
}

// onlyParams refuses a query parameter other than known: a misspelt one
// would otherwise be ignored without a word.
func onlyParams(q url.Values, known ...string) error {
	for name := range q {
		if !slices.Contains(known, name) {
			return fmt.Errorf("unknown parameter %q; use %s", name, strings.Join(known, ", "))
		}
	}
	return nil
}

// wrap returns pub behind the claim check; pub alone without one.
func (cc *claimCheck) wrap(pub outbox.Publisher) (outbox.Publisher, error) {
	if cc == nil {
		return pub, nil
	}
	return outbox.ClaimCheck(pub, cc.blobs, cc.cfg)
}

// discardDead discards the dead messages ids with admin and, with a claim
// check, deletes their blobs.
func (cc *claimCheck) discardDead(ctx context.Context, admin outbox.DeadDiscarder, ids ...uuid.UUID) (int, error) {
	if cc == nil {
		return admin.DiscardDead(ctx, ids...)
	}
	return outbox.DiscardDeadBlobs(ctx, admin, cc.blobs, cc.cfg, ids...)
}

// sweep deletes, until ctx ends, the blobs of a file: store older than its
// retention, at once and every claimCheckSweepInterval; S3 needs none (a
// lifecycle rule does it).
func (cc *claimCheck) sweep(ctx context.Context, log *slog.Logger) {
	if cc == nil || cc.dir == "" {
		return
	}
	t := time.NewTicker(claimCheckSweepInterval)
	defer t.Stop()
	for {
		n, err := outbox.DirBlobStore(cc.dir).Sweep(ctx, cc.cfg.Prefix, cc.retention)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("outbox relay: sweeping the claim check's blobs failed; the next sweep tries again", slog.String("dir", cc.dir), slog.Any("error", err))
		case n > 0:
			log.Info("outbox relay: swept the claim check's blobs past retention", slog.String("dir", cc.dir), slog.Int("deleted", n), slog.Duration("retention", cc.retention))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
