package outboxredis_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The module graph rule: a user of the root module, or of any other module
// of the repository, gets no Redis client. go-redis belongs to outboxredis
// (and the CLI) alone, so the root package must not import it, directly or
// through anything.
func TestRootPackageImportsNoRedisClient(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/go-outbox/outbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps of the root package: %v\n%s", err, out)
	}
	for dep := range strings.FieldsSeq(string(out)) {
		if strings.Contains(dep, "redis") {
			t.Errorf("the root package depends on %s; the Redis client belongs to outboxredis only", dep)
		}
	}
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mod), "redis") {
		t.Errorf("the root go.mod names redis:\n%s", mod)
	}
}
