package outboxhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxhttp"
)

// A receiver checks the signature before anything else, then applies the
// message once per idempotency key. The publisher would normally be handed
// to outbox.NewRelay; here it publishes one message directly. Both ends hold
// the secret as Standard Webhooks tools print it: whsec_ and the base64 of
// 32 random bytes (openssl rand -base64 32).
func Example() {
	secret, err := outboxhttp.ParseSecret("whsec_ZXhhbXBsZSBrZXksIHVzZSAzMiByYW5kb20gYnl0ZXM=")
	if err != nil {
		panic(err)
	}

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := outboxhttp.Verify(secret, r.Header, body, 0); err != nil {
			// The publisher retries a 401 and logs it as a configuration
			// error, so a secret fixed in time loses no message.
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Deduplicate on r.Header.Get(outboxhttp.HeaderWebhookID), the
		// message id, e.g. with an inbox table, in the transaction that
		// applies body.
		fmt.Printf("received %s %s\n", r.Header.Get(outboxhttp.HeaderTopic), body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	pub, err := outboxhttp.New(outboxhttp.Config{URL: receiver.URL + "/hooks/outbox", Secret: secret})
	if err != nil {
		panic(err)
	}
	defer pub.Close()
	// relay, err := outbox.NewRelay(store, pub, outbox.Config{})
	msg := outbox.Message{ID: uuid.Must(uuid.NewV7()), Topic: "orders.created", Payload: []byte(`{"order":42}`)}
	errs := pub.Publish(context.Background(), []outbox.Message{msg})
	fmt.Println("published:", errs[0] == nil)
	// Output:
	// received orders.created {"order":42}
	// published: true
}
