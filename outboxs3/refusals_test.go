package outboxs3_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/go-outbox/outbox"
)

// refusingS3 starts an in-process S3 with bucket whose answers refuse
// requests of method with S3's error code and status; the others pass.
func refusingS3(t *testing.T, bucket, method, code string, status int) string {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatal(err)
	}
	fake := gofakes3.New(backend).Server()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			fake.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead { // a HEAD's answer has no body
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>refused (injected)</Message></Error>`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Credentials S3 refuses: Check says what to grant; a Put fails
// retryably, so that the message waits for the fix instead of dying.
func TestAccessDeniedFailsCheckWithWhatToGrantAndAPutRetryably(t *testing.T) {
	s := open(t, refusingS3(t, "blobs", http.MethodHead, "AccessDenied", http.StatusForbidden), "blobs")
	if err := s.Check(t.Context()); err == nil || !strings.Contains(err.Error(), "s3:PutObject") {
		t.Fatalf("Check refused access: %v; want an error naming the permissions to grant", err)
	}
	s = open(t, refusingS3(t, "blobs", http.MethodPut, "AccessDenied", http.StatusForbidden), "blobs")
	if err := s.Put(t.Context(), "k", []byte("x")); err == nil || outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
		t.Fatalf("Put refused access: %v; want a retryable error", err)
	}
}

// An object S3 will never take (over its size limit) fails permanently: no
// retry can help.
func TestAnObjectS3RefusesAsTooLargeFailsPermanently(t *testing.T) {
	s := open(t, refusingS3(t, "blobs", http.MethodPut, "EntityTooLarge", http.StatusBadRequest), "blobs")
	if err := s.Put(t.Context(), "k", []byte("x")); !outbox.IsPermanent(err) {
		t.Fatalf("Put refused as too large: %v; want a permanent error", err)
	}
}
