package outboxs3_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The module graph rule: a user of outboxs3 gets the S3 part of the AWS SDK
// and nothing of a broker's client (SQS and SNS included) or a store's driver.
func TestOutboxs3BringsNoBrokersClientNorStoresDriver(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/go-outbox/outbox/outboxs3").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps of outboxs3: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		for _, other := range []string{"aws-sdk-go-v2/service/sqs", "aws-sdk-go-v2/service/sns", "redis/go-redis", "rabbitmq/amqp091", "nats-io/", "twmb/franz-go", "cloud.google.com/go/pubsub", "jackc/pgx", "modernc.org/sqlite", "go-sql-driver/mysql", "gofakes3"} {
			if strings.Contains(dep, other) {
				t.Errorf("outboxs3 depends on %s; a user of outboxs3 must not get %s", dep, other)
			}
		}
	}
}
