package outboxpubsub_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The module graph rule: a user of outboxpubsub gets the Pub/Sub client and
// no other broker's or store's (go-redis, amqp091, nats, franz-go, pgx),
// and a user of the root module gets no Google Cloud client at all.
func TestModuleBringsNoOtherBrokerClientAndTheRootNoPubSub(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-test", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps of outboxpubsub: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, other := range []string{"redis", "amqp091", "nats-io", "franz-go", "jackc/pgx", "aws-sdk-go"} {
			if strings.Contains(dep, other) {
				t.Errorf("outboxpubsub depends on %s; a Pub/Sub user must not get the %s client", dep, other)
			}
		}
	}
	out, err = exec.Command("go", "list", "-deps", "github.com/go-outbox/outbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps of the root package: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.Contains(dep, "cloud.google.com") || strings.Contains(dep, "google.golang.org/grpc") {
			t.Errorf("the root package depends on %s; the Pub/Sub client belongs to outboxpubsub only", dep)
		}
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mod), "pubsub") {
		t.Errorf("the root go.mod names pubsub:\n%s", mod)
	}
}
