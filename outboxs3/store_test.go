package outboxs3_test

import (
	"bytes"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxs3"
)

// fakeS3 starts an in-process S3 with one bucket and returns its URL.
func fakeS3(t *testing.T, bucket string) string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	return srv.URL
}

// open returns a Store on bucket of the S3 at endpoint, addressed by path.
func open(t *testing.T, endpoint, bucket string) *outboxs3.Store {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	s, err := outboxs3.Open(t.Context(), bucket, outboxs3.Config{Endpoint: endpoint, PathStyle: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func TestAStorePutsGetsAndDeletesABlobByteForByte(t *testing.T) {
	s := open(t, fakeS3(t, "blobs"), "blobs")
	ctx := t.Context()
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check of an existing bucket: %v", err)
	}
	key := "outbox-claim-check/0190e2a6-7d1c-7c4e-9d2e-3f1b2a4c5d6e"
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i * 31)
	}
	for _, data := range [][]byte{[]byte("first"), big} {
		if err := s.Put(ctx, key, data); err != nil {
			t.Fatalf("Put of %d bytes: %v", len(data), err)
		}
		got, err := s.Get(ctx, key)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after a Put of %d bytes: %d bytes, %v; want them back", len(data), len(got), err)
		}
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, outbox.ErrBlobNotFound) {
		t.Fatalf("Get after Delete: %v; want outbox.ErrBlobNotFound", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete of a missing key: %v; want nil", err)
	}
}

func TestGetOfAKeyNeverPutMatchesErrBlobNotFoundAndIsRetryable(t *testing.T) {
	s := open(t, fakeS3(t, "blobs"), "blobs")
	_, err := s.Get(t.Context(), "never-put")
	if !errors.Is(err, outbox.ErrBlobNotFound) || outbox.IsPermanent(err) {
		t.Fatalf("Get of a key never put: %v; want a retryable outbox.ErrBlobNotFound", err)
	}
}

func TestCheckOfAMissingBucketSaysHowToCreateIt(t *testing.T) {
	s := open(t, fakeS3(t, "blobs"), "other")
	if err := s.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "aws s3 mb s3://other") {
		t.Fatalf("Check of a missing bucket: %v; want an error with the command that creates it", err)
	}
}

func TestAPutToAnS3ThatRefusesConnectionsIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := open(t, "http://"+addr, "blobs")
	err = s.Put(t.Context(), "k", []byte("x"))
	if !outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Fatalf("Put with no S3 listening: %v; want outbox.Unavailable (nothing stored, no attempt to count)", err)
	}
}

func TestNewRefusesANilClientAndAnEmptyBucket(t *testing.T) {
	t.Parallel()
	if _, err := outboxs3.New(nil, "b"); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New with no client: %v; want outbox.ErrInvalidConfig", err)
	}
	if _, err := outboxs3.New(s3.New(s3.Options{}), ""); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("New with no bucket: %v; want outbox.ErrInvalidConfig", err)
	}
}
