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
// to outbox.NewRelay; here it publishes one message directly.
func Example() {
	secret := []byte("32 random bytes shared by both ends")

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := outboxhttp.Verify(secret, r.Header.Get(outboxhttp.HeaderSignature), body, 0); err != nil {
			// A 4xx dead-letters the message: a forged or misconfigured
			// sender should not be retried.
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// Deduplicate on r.Header.Get(outboxhttp.HeaderIdempotencyKey),
		// e.g. with an inbox table, in the transaction that applies body.
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
