package typedconsumer_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/go-outbox/outbox/internal/amqptest"
)

// wantOutput is what every example prints.
const wantOutput = `read-model: o-1 ada@example.com 42.00 EUR paid
read-model: o-2 bob@example.com 19.99 EUR placed
mailer: to ada@example.com: Your order o-1 (42.00 EUR)
mailer: to ada@example.com: Payment received for order o-1
mailer: to bob@example.com: Your order o-2 (19.99 EUR)
`

// Example_rabbitmq, which needs a broker, runs against TEST_AMQP_URL (set
// by scripts/test) on an exchange and a queue of its own, deleted after,
// and prints what the other examples print.
func TestRabbitMQExampleRuns(t *testing.T) {
	url := amqptest.URL(t) // skips without TEST_AMQP_URL, fails under CI
	name := "typedconsumer-example-" + rand.Text()[:8]
	t.Cleanup(func() {
		ch, err := amqptest.Dial(t, url).Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDelete(name, false, false, false); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
		if err := ch.ExchangeDelete(name, false, false); err != nil {
			t.Errorf("delete exchange %s: %v", name, err)
		}
	})
	var out bytes.Buffer
	if err := consumeFromRabbitMQ(context.Background(), url, name, &out); err != nil {
		t.Fatalf("the example failed: %v\noutput so far:\n%s", err, out.String())
	}
	if out.String() != wantOutput {
		t.Fatalf("the example printed:\n%s\nwant:\n%s", out.String(), wantOutput)
	}
}
