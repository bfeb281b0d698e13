// Package sqlident validates and quotes the identifiers (schema, table and
// the names derived from them) that the SQL stores build into statement
// text. Identifiers cannot be bound as parameters, so a name reaches SQL only
// after Check accepted it, and only through Quote.
//
// Check returns the *outbox.ConfigError that the stores' constructors
// return, so this package imports package outbox, which therefore must not
// import it.
package sqlident

import (
	"fmt"
	"regexp"

	"github.com/go-outbox/outbox"
)

// Pattern is what a valid identifier matches: lower-case ASCII letters,
// digits and underscores, not starting with a digit. Such a name needs no
// escaping in any SQL dialect, and PostgreSQL does not fold its case.
const Pattern = `^[a-z_][a-z0-9_]*$`

var patternRE = regexp.MustCompile(Pattern)

// Check returns a *outbox.ConfigError naming field (the option's full name,
// such as "outboxpg.Options.Table") if value is longer than max bytes or does
// not match Pattern, and nil if value is a valid identifier.
func Check(field, value string, max int) error {
	switch {
	case len(value) > max:
		return &outbox.ConfigError{Field: field, Value: fmt.Sprintf("%q", value),
			Fix: fmt.Sprintf("is %d bytes; use at most %d", len(value), max)}
	case !patternRE.MatchString(value):
		return &outbox.ConfigError{Field: field, Value: fmt.Sprintf("%q", value),
			Fix: "use lower-case letters, digits and underscores, not starting with a digit (" + Pattern + ")"}
	}
	return nil
}

// Quote quotes an identifier that Check accepted. Quoting is belt and
// braces: a valid name has no character that needs escaping, and quoting
// keeps keywords such as "order" usable as names.
func Quote(name string) string { return `"` + name + `"` }
