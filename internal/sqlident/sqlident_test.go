package sqlident

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-outbox/outbox"
)

func TestCheckAcceptsValidIdentifiers(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"outbox", "_x", "a1", "order", "public", "t_2_migrations", strings.Repeat("a", 40)} {
		if err := Check("pkg.Options.Table", name, 40); err != nil {
			t.Errorf("Check(%q) = %v, want nil", name, err)
		}
	}
}

func TestCheckRejectsInvalidIdentifiers(t *testing.T) {
	t.Parallel()
	for _, name := range []string{
		"", "1abc", "Outbox", "out-box", "out box", `a"b`, "a;drop", "a.b", "é", "a\n", strings.Repeat("a", 41),
	} {
		err := Check("pkg.Options.Table", name, 40)
		var ce *outbox.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Check(%q) = %v, want a *outbox.ConfigError", name, err)
			continue
		}
		if ce.Field != "pkg.Options.Table" {
			t.Errorf("Check(%q) names field %q, want pkg.Options.Table", name, ce.Field)
		}
	}
}

func TestCheckSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	long := Check("f", strings.Repeat("a", 64), 63).Error()
	if !strings.Contains(long, "is 64 bytes; use at most 63") {
		t.Errorf("too long: %q does not give the lengths", long)
	}
	bad := Check("f", "A", 63).Error()
	if !strings.Contains(bad, Pattern) || !strings.Contains(bad, `"A"`) {
		t.Errorf("bad characters: %q does not quote the value and the pattern", bad)
	}
}

func TestQuote(t *testing.T) {
	t.Parallel()
	if got := Quote("order"); got != `"order"` {
		t.Errorf(`Quote("order") = %s, want "order" in double quotes`, got)
	}
}
