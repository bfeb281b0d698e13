package outboxs3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/go-outbox/outbox"
)

// MaxBlobSize is the largest blob one PutObject takes: 5 GiB. Put fails a
// larger one permanently, unsent.
const MaxBlobSize = 5 << 30

// Config configures Open. The zero value reaches AWS S3 with the region and
// credentials of the SDK's standard chain.
type Config struct {
	// Endpoint is the base URL of an S3-compatible service (MinIO, Ceph,
	// Cloudflare R2, a local fake): "http://localhost:9000", say. Empty
	// means AWS S3.
	Endpoint string
	// PathStyle addresses the bucket in the path (ENDPOINT/BUCKET/KEY)
	// rather than in the host name (BUCKET.ENDPOINT/KEY). Most
	// S3-compatible services, and any endpoint without wildcard DNS, need
	// it.
	PathStyle bool
	// Region overrides the region of the SDK's chain (AWS_REGION, the
	// shared config). With an Endpoint and no region anywhere,
	// "us-east-1", which S3-compatible services accept.
	Region string
}

// Store is an outbox.BlobStore on one S3 bucket. It is safe for concurrent
// use.
type Store struct {
	bucket string
	client *s3.Client
}

// New returns a Store keeping blobs in bucket with client, which the
// caller made. It never connects: call Check at start. It returns a
// *outbox.ConfigError for a nil client or an empty bucket.
func New(client *s3.Client, bucket string) (*Store, error) {
	switch {
	case client == nil:
		return nil, &outbox.ConfigError{Field: "outboxs3.New client", Value: "nil", Fix: "pass an S3 client, e.g. s3.NewFromConfig(awsCfg), or use outboxs3.Open"}
	case bucket == "":
		return nil, &outbox.ConfigError{Field: "outboxs3.New bucket", Value: `""`, Fix: "name the bucket the relay and its consumers share"}
	}
	return &Store{bucket: bucket, client: client}, nil
}

// Open returns a Store with a client of its own for bucket, with the
// credentials of the SDK's standard chain (AWS_ACCESS_KEY_ID, AWS_PROFILE
// and the shared files, the instance's or task's role) and the endpoint,
// addressing and region of cfg. optFns change the client's options further.
// With an Endpoint, the client sends checksums only where S3 requires
// them, as services that are not AWS S3 may refuse the SDK's newer
// defaults. It does not connect: call Check at start.
func Open(ctx context.Context, bucket string, cfg Config, optFns ...func(*s3.Options)) (*Store, error) {
	var load []func(*config.LoadOptions) error
	if cfg.Region != "" {
		load = append(load, config.WithRegion(cfg.Region))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, fmt.Errorf("outboxs3: load the AWS configuration (environment, shared files): %w", err)
	}
	if awsCfg.Region == "" && cfg.Endpoint != "" {
		awsCfg.Region = "us-east-1"
	}
	opts := append([]func(*s3.Options){func(o *s3.Options) {
		o.UsePathStyle = cfg.PathStyle
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	}}, optFns...)
	return New(s3.NewFromConfig(awsCfg, opts...), bucket)
}

// Bucket returns the bucket the store keeps its blobs in.
func (s *Store) Bucket() string { return s.bucket }

// Client returns the S3 client the store uses.
func (s *Store) Client() *s3.Client { return s.client }

// Check tells at start whether the store can work: the bucket exists and
// the credentials may reach it (HeadBucket). The error says what is wrong
// and how to fix it.
func (s *Store) Check(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)})
	if err == nil {
		return nil
	}
	switch code := errorCode(err); {
	case code == "NotFound" || code == "NoSuchBucket":
		return fmt.Errorf("outboxs3: bucket %s does not exist: create it (aws s3 mb s3://%s) or correct the name, endpoint or region: %w", s.bucket, s.bucket, err)
	case code == "Forbidden" || code == "AccessDenied":
		return fmt.Errorf("outboxs3: access to bucket %s denied: check the credentials and that they allow s3:PutObject, s3:GetObject and s3:DeleteObject on it, and s3:ListBucket (without it S3 answers a missing blob with AccessDenied, not NoSuchKey): %w", s.bucket, err)
	}
	return fmt.Errorf("outboxs3: check bucket %s: %w", s.bucket, err)
}

// Delete removes the blob of key; a missing one is no error (S3 answers a
// delete of a missing key with success).
func (s *Store) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil && !isNoSuchKey(err) {
		return s.fail("delete", key, err)
	}
	return nil
}

// Get returns the blob of key, or an error matching outbox.ErrBlobNotFound.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if isNoSuchKey(err) {
		return nil, fmt.Errorf("outboxs3: blob %q in bucket %s: %w", key, s.bucket, outbox.ErrBlobNotFound)
	}
	if err != nil {
		return nil, s.fail("get", key, err)
	}
	defer out.Body.Close()
	size := 0
	if out.ContentLength != nil && *out.ContentLength > 0 && *out.ContentLength <= MaxBlobSize {
		size = int(*out.ContentLength)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, err := io.Copy(buf, out.Body); err != nil {
		return nil, s.fail("get", key, err)
	}
	return buf.Bytes(), nil
}

// Put stores data under key, replacing what was there: S3 makes a PutObject
// visible whole, or not at all.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if len(data) > MaxBlobSize {
		return outbox.Permanent(fmt.Errorf("outboxs3: put blob %q: %d bytes, over the %d that one PutObject takes", key, len(data), MaxBlobSize))
	}
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
		ContentType:   aws.String("application/octet-stream"),
	})
	if err != nil {
		return s.fail("put", key, err)
	}
	return nil
}

// fail wraps err, the failure of op on key, and marks it by what a retry
// can do: a refused connection proves nothing was stored (outbox.Unavailable:
// the relay counts no attempt), a key S3 refuses fails for good, anything
// else is retried.
func (s *Store) fail(op, key string, err error) error {
	wrapped := fmt.Errorf("outboxs3: %s blob %q in bucket %s: %w", op, key, s.bucket, err)
	switch code := errorCode(err); {
	case isDialError(err):
		return outbox.Unavailable(wrapped)
	case code == "EntityTooLarge" || code == "KeyTooLongError":
		return outbox.Permanent(wrapped)
	}
	return wrapped
}

// isNoSuchKey reports whether err says the key holds nothing.
func isNoSuchKey(err error) bool {
	var nsk *types.NoSuchKey
	return errors.As(err, &nsk) || errorCode(err) == "NoSuchKey"
}

// errorCode returns the S3 error code in err's chain, or "".
func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// isDialError reports whether err is a failure to open a connection (or to
// find the host), which proves nothing was sent.
func isDialError(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &op) && op.Op == "dial" || errors.As(err, &dns)
}
