package outboxhttp_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/webhooktest"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/publishertest"
)

func TestSignatureOfASentRequestVerifiesOnlyWithTheSecretAndTheBodyAsSent(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL})
	m := publishertest.Messages("orders.created", 1)[0]
	if err := p.Publish(context.Background(), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	r := e.All()[0]
	header := r.Header.Get(outboxhttp.HeaderSignature)
	if !strings.HasPrefix(header, "t=") || !strings.Contains(header, ",v1=") {
		t.Fatalf("%s header %q, want t=<seconds>,v1=<hex>", outboxhttp.HeaderSignature, header)
	}
	if err := outboxhttp.Verify(webhooktest.Secret, header, r.Body, time.Minute); err != nil {
		t.Fatalf("message %s: Verify with the right secret: %v", m.ID, err)
	}
	tampered := append([]byte(nil), r.Body...)
	tampered[len(tampered)-1] ^= 1
	for name, err := range map[string]error{
		"wrong secret":   outboxhttp.Verify([]byte("another secret"), header, r.Body, time.Minute),
		"tampered body":  outboxhttp.Verify(webhooktest.Secret, header, tampered, time.Minute),
		"no header":      outboxhttp.Verify(webhooktest.Secret, "", r.Body, time.Minute),
		"empty secret":   outboxhttp.Verify(nil, header, r.Body, time.Minute),
		"other time":     outboxhttp.Verify(webhooktest.Secret, strings.Replace(header, "t=", "t=1", 1), r.Body, 0),
		"no v1":          outboxhttp.Verify(webhooktest.Secret, strings.Split(header, ",")[0], r.Body, time.Minute),
		"garbage header": outboxhttp.Verify(webhooktest.Secret, "nonsense", r.Body, time.Minute),
	} {
		if !errors.Is(err, outboxhttp.ErrInvalidSignature) {
			t.Errorf("%s: Verify = %v, want ErrInvalidSignature", name, err)
		}
	}
}

func TestVerifyRejectsATimestampOutsideTheTolerance(t *testing.T) {
	t.Parallel()
	body := []byte(`{"n":1}`)
	old := outboxhttp.Sign(webhooktest.Secret, time.Now().Add(-10*time.Minute), body)
	if err := outboxhttp.Verify(webhooktest.Secret, old, body, 0); !errors.Is(err, outboxhttp.ErrInvalidSignature) || !strings.Contains(err.Error(), "tolerance") {
		t.Fatalf("10 minutes old with the default tolerance: %v, want a tolerance error", err)
	}
	if err := outboxhttp.Verify(webhooktest.Secret, old, body, 15*time.Minute); err != nil {
		t.Fatalf("10 minutes old with a tolerance of 15: %v", err)
	}
	future := outboxhttp.Sign(webhooktest.Secret, time.Now().Add(10*time.Minute), body)
	if err := outboxhttp.Verify(webhooktest.Secret, future, body, time.Minute); err == nil {
		t.Fatal("a timestamp 10 minutes ahead passed a tolerance of one minute")
	}
}

func TestVerifyAcceptsAnyMatchingV1AndIgnoresUnknownFields(t *testing.T) {
	t.Parallel()
	body := []byte("payload")
	now := time.Now()
	good := outboxhttp.Sign(webhooktest.Secret, now, body)
	other := outboxhttp.Sign([]byte("old secret"), now, body)
	_, otherV1, _ := strings.Cut(other, ",")
	header := good + "," + otherV1 + ",v2=whatever, v1=nothex"
	if err := outboxhttp.Verify(webhooktest.Secret, header, body, 0); err != nil {
		t.Fatalf("Verify(%q) = %v", header, err)
	}
	if err := outboxhttp.Verify([]byte("old secret"), header, body, 0); err != nil {
		t.Fatalf("Verify with the secret of the second v1: %v", err)
	}
}
