package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
)

// The example runs to the end and each handler applied each event once: two
// orders in the read model, the paid one paid, one e-mail per order.
func TestExampleRunsAndEveryHandlerAppliesEachEventOnce(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), filepath.Join(t.TempDir(), "orders.db"), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := []string{
		"e-mail to ada@example.com: Your order o-1 (42.00 EUR)",
		"e-mail to bob@example.com: Your order o-2 (19.99 EUR)",
		"read model: o-1 ada@example.com 4200 cents paid",
		"read model: o-2 bob@example.com 1999 cents placed",
	}
	for _, w := range want {
		if bytes.Count(out.Bytes(), []byte(w)) != 1 {
			t.Errorf("output does not have %q exactly once:\n%s", w, out.String())
		}
	}
}
