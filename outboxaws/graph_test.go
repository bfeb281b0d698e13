package outboxaws_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The module graph rule: a user of outboxaws gets the AWS SDK and nothing of
// the other brokers' clients or the stores' drivers.
func TestOutboxawsBringsNoOtherBrokersClientNorStoresDriver(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/go-outbox/outbox/outboxaws").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps of outboxaws: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, other := range []string{"redis/go-redis", "rabbitmq/amqp091", "nats-io/", "twmb/franz-go", "jackc/pgx", "cloud.google.com/go/pubsub", "modernc.org/sqlite", "go-sql-driver/mysql"} {
			if strings.Contains(dep, other) {
				t.Errorf("outboxaws depends on %s; a user of outboxaws must not get %s", dep, other)
			}
		}
	}
}

// The root package imports nothing of the AWS SDK.
func TestRootPackageImportsNoAWSSDK(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/go-outbox/outbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps of the root package: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "aws-sdk-go") {
		t.Errorf("the root package depends on the AWS SDK:\n%s", out)
	}
}
