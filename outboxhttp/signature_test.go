package outboxhttp_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/webhooktest"
	"github.com/go-outbox/outbox/outboxhttp"
	"github.com/go-outbox/outbox/publishertest"
)

// signed returns the Standard Webhooks headers of a request with id and body
// signed with secret at t.
func signed(secret []byte, id string, t time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(outboxhttp.HeaderWebhookID, id)
	h.Set(outboxhttp.HeaderWebhookTimestamp, strconv.FormatInt(t.Unix(), 10))
	h.Set(outboxhttp.HeaderWebhookSignature, outboxhttp.Sign(secret, id, t, body))
	return h
}

func with(h http.Header, name, value string) http.Header {
	h = h.Clone()
	h.Set(name, value)
	return h
}

func TestSignatureOfASentRequestVerifiesOnlyWithTheSecretTheIDAndTheBodyAsSent(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL})
	m := publishertest.Messages("orders.created", 1)[0]
	if err := p.Publish(context.Background(), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	r := e.All()[0]
	if sig := r.Header.Get(outboxhttp.HeaderWebhookSignature); !strings.HasPrefix(sig, "v1,") || strings.Contains(sig, " ") {
		t.Fatalf("%s header %q, want one v1,<base64>", outboxhttp.HeaderWebhookSignature, sig)
	}
	if err := outboxhttp.Verify(webhooktest.Secret, r.Header, r.Body, time.Minute); err != nil {
		t.Fatalf("message %s: Verify with the right secret: %v", m.ID, err)
	}
	tampered := append([]byte(nil), r.Body...)
	tampered[len(tampered)-1] ^= 1
	ts, _ := strconv.ParseInt(r.Header.Get(outboxhttp.HeaderWebhookTimestamp), 10, 64)
	for name, err := range map[string]error{
		"wrong secret":       outboxhttp.Verify([]byte("another secret, 32 bytes of it.."), r.Header, r.Body, time.Minute),
		"tampered body":      outboxhttp.Verify(webhooktest.Secret, r.Header, tampered, time.Minute),
		"another id":         outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookID, publishertest.Messages("t", 1)[0].ID.String()), r.Body, time.Minute),
		"another timestamp":  outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookTimestamp, strconv.FormatInt(ts+1, 10)), r.Body, time.Minute),
		"no headers":         outboxhttp.Verify(webhooktest.Secret, http.Header{}, r.Body, time.Minute),
		"no id":              outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookID, ""), r.Body, time.Minute),
		"no timestamp":       outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookTimestamp, ""), r.Body, time.Minute),
		"empty secret":       outboxhttp.Verify(nil, r.Header, r.Body, time.Minute),
		"garbage signature":  outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookSignature, "nonsense"), r.Body, time.Minute),
		"timestamp not int":  outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookTimestamp, "1.5"), r.Body, time.Minute),
		"old Outbox scheme":  outboxhttp.Verify(webhooktest.Secret, with(r.Header, outboxhttp.HeaderWebhookSignature, "t=1,v1="+strings.Repeat("0", 64)), r.Body, time.Minute),
		"signature of a dot": outboxhttp.Verify(webhooktest.Secret, signed(webhooktest.Secret, "a.b", time.Now(), r.Body), r.Body, time.Minute),
	} {
		if !errors.Is(err, outboxhttp.ErrInvalidSignature) {
			t.Errorf("%s: Verify = %v, want ErrInvalidSignature", name, err)
		}
	}
}

// specVerify is the receiver's side of the Standard Webhooks specification
// written from the specification alone, sharing no code with the package:
// the HMAC-SHA256, keyed with secret, of "<webhook-id>.<webhook-timestamp>.<body>",
// base64-encoded, must be one of the space-separated "v1,<base64>" entries of
// webhook-signature.
func specVerify(t *testing.T, secret []byte, h http.Header, body []byte) {
	t.Helper()
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	if id == "" || ts == "" || sigs == "" {
		t.Fatalf("request lacks a Standard Webhooks header: webhook-id %q, webhook-timestamp %q, webhook-signature %q", id, ts, sigs)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Split(sigs, " ") {
		if sig == want {
			return
		}
	}
	t.Fatalf("webhook-signature %q has no entry %q (id %q, timestamp %q)", sigs, want, id, ts)
}

func TestSignedRequestVerifiesWithAnIndependentImplementationOfTheSpec(t *testing.T) {
	t.Parallel()
	e := webhooktest.NewEndpoint(t, nil)
	p := webhooktest.NewPublisher(t, outboxhttp.Config{URL: e.URL})
	m := publishertest.Messages("orders.created", 1)[0]
	before := time.Now().Unix()
	if err := p.Publish(context.Background(), []outbox.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	after := time.Now().Unix()
	r := e.All()[0]
	specVerify(t, webhooktest.Secret, r.Header, r.Body)
	if got := r.Header.Get("webhook-id"); got != m.ID.String() {
		t.Errorf("message %s sent with webhook-id %q, want the message id", m.ID, got)
	}
	ts, err := strconv.ParseInt(r.Header.Get("webhook-timestamp"), 10, 64)
	if err != nil || ts < before || ts > after {
		t.Errorf("message %s: webhook-timestamp %q, want the unix seconds of sending, %d..%d", m.ID, r.Header.Get("webhook-timestamp"), before, after)
	}
}

// The published test vector of the Standard Webhooks specification (its
// reference libraries' tests use it), and one computed for this package's
// ids with `openssl dgst -sha256 -mac HMAC`: a receiver using any
// Standard Webhooks library verifies what Sign makes.
func TestSignMatchesKnownTestVectors(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		secret, id string
		unix       int64
		body, want string
	}{
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
		{"whsec_b3V0Ym94IHRlc3QgdmVjdG9yIGtleSwgMzIgYnl0ZXM=", "01890a5d-ac96-774b-bcce-b302099a8057", 1780000000, `{"order":42}`, "v1,p2rCL2mUpMLJ8ObcQ591KPdmXy4qghhjA2qntlXMgtY="},
	} {
		key, err := outboxhttp.ParseSecret(v.secret)
		if err != nil {
			t.Fatalf("ParseSecret(%q): %v", v.secret, err)
		}
		at := time.Unix(v.unix, 0)
		if got := outboxhttp.Sign(key, v.id, at, []byte(v.body)); got != v.want {
			t.Errorf("Sign(%s, %s, %d, %s) = %q, want %q", v.secret, v.id, v.unix, v.body, got, v.want)
		}
		h := http.Header{}
		h.Set("webhook-id", v.id)
		h.Set("webhook-timestamp", strconv.FormatInt(v.unix, 10))
		h.Set("webhook-signature", "v1a,c2lnbmVkIHdpdGggZWQyNTUxOQ== "+v.want)
		if err := outboxhttp.Verify(key, h, []byte(v.body), time.Since(at)+time.Hour); err != nil {
			t.Errorf("Verify of the vector of %s: %v", v.id, err)
		}
		if err := outboxhttp.Verify(key, h, []byte(v.body), 0); !errors.Is(err, outboxhttp.ErrInvalidSignature) || !strings.Contains(err.Error(), "tolerance") {
			t.Errorf("Verify of the vector of %s, years old, with the default tolerance: %v, want a tolerance error", v.id, err)
		}
	}
}

func TestParseSecretReadsWhsecBase64AndRejectsOtherFormsWithoutShowingThem(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"whsec_c2l4dGVlbiBieXRlcyEhIQ==":    "sixteen bytes!!!",
		"whsec_c2l4dGVlbiBieXRlcyEhIQ":      "sixteen bytes!!!", // unpadded
		" whsec_c2l4dGVlbiBieXRlcyEhIQ==\n": "sixteen bytes!!!",
	} {
		got, err := outboxhttp.ParseSecret(in)
		if err != nil || string(got) != want {
			t.Errorf("ParseSecret(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "c2VjcmV0czNjcmV0", "whsec_", "whsec_s3cret*s3cret", "WHSEC_c2VjcmV0czNjcmV0", "whsec_c2VjcmV0czNjcmV0!"} {
		_, err := outboxhttp.ParseSecret(in)
		if !errors.Is(err, outboxhttp.ErrInvalidSecret) || !strings.Contains(err.Error(), "whsec_") {
			t.Errorf("ParseSecret(%q) = %v, want ErrInvalidSecret saying the whsec_ form", in, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("ParseSecret(%q): error %q shows the secret", in, err)
		}
	}
}

func TestVerifyRejectsATimestampOutsideTheTolerance(t *testing.T) {
	t.Parallel()
	body := []byte(`{"n":1}`)
	old := signed(webhooktest.Secret, "msg-1", time.Now().Add(-10*time.Minute), body)
	if err := outboxhttp.Verify(webhooktest.Secret, old, body, 0); !errors.Is(err, outboxhttp.ErrInvalidSignature) || !strings.Contains(err.Error(), "tolerance") {
		t.Fatalf("10 minutes old with the default tolerance: %v, want a tolerance error", err)
	}
	if err := outboxhttp.Verify(webhooktest.Secret, old, body, 15*time.Minute); err != nil {
		t.Fatalf("10 minutes old with a tolerance of 15: %v", err)
	}
	future := signed(webhooktest.Secret, "msg-1", time.Now().Add(10*time.Minute), body)
	if err := outboxhttp.Verify(webhooktest.Secret, future, body, time.Minute); err == nil {
		t.Fatal("a timestamp 10 minutes ahead passed a tolerance of one minute")
	}
}

func TestVerifyAcceptsAnyMatchingV1AndSkipsTheOthers(t *testing.T) {
	t.Parallel()
	body := []byte("payload")
	now := time.Now()
	oldSecret := []byte("the secret before the rotation..")
	h := signed(webhooktest.Secret, "msg-1", now, body)
	other := outboxhttp.Sign(oldSecret, "msg-1", now, body)
	h.Set(outboxhttp.HeaderWebhookSignature, "v1a,c2lnbmVk v1,nothex "+h.Get(outboxhttp.HeaderWebhookSignature)+"  "+other+" v2,whatever v1,")
	if err := outboxhttp.Verify(webhooktest.Secret, h, body, 0); err != nil {
		t.Fatalf("Verify(%q) = %v", h.Get(outboxhttp.HeaderWebhookSignature), err)
	}
	if err := outboxhttp.Verify(oldSecret, h, body, 0); err != nil {
		t.Fatalf("Verify with the secret of the second v1: %v", err)
	}
}
