// Package headerjson decodes message headers as the stores keep them: a JSON
// object of strings (jsonb in PostgreSQL, text in SQLite), written with
// encoding/json's Marshal of the validated map. Reading is stricter than
// json.Unmarshal, which quietly replaces what it cannot represent: a row
// written by hand or by another program must decode exactly or fail with an
// error that says why.
package headerjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Decode returns the headers that b, a stored headers value, holds. JSON null
// means no headers (nil), like SQL NULL. Anything but a JSON object whose
// values are all strings is an error, and so is what json.Unmarshal would
// change without a word: a null value (into ""), bytes that are not UTF-8,
// and \u escapes of half a surrogate pair (into U+FFFD). Of a repeated name
// the last value wins, as in PostgreSQL's jsonb.
func Decode(b []byte) (map[string]string, error) {
	if !utf8.Valid(b) {
		return nil, errors.New("headers are not valid UTF-8")
	}
	if at, ok := surrogatesPaired(b); !ok {
		return nil, fmt.Errorf("headers hold %s at byte %d, half a UTF-16 surrogate pair, which is no character", b[at:at+6], at)
	}
	// Pointers, because json.Unmarshal stores a null value as "" in a
	// map[string]string.
	var values map[string]*string
	if err := json.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("headers are not a JSON object of strings: %w", err)
	}
	if values == nil {
		return nil, nil
	}
	h := make(map[string]string, len(values))
	for name, v := range values {
		if v == nil {
			return nil, fmt.Errorf("header %q is null; header values are strings", name)
		}
		h[name] = *v
	}
	return h, nil
}

// surrogatesPaired reports whether every \u escape of a UTF-16 surrogate in b
// is half of a high-low pair, and if not, where the first lone one is. In valid JSON a
// backslash occurs only in strings, as the start of an escape, so escapes can
// be found without following the strings; in invalid JSON, json.Unmarshal
// reports the real problem.
func surrogatesPaired(b []byte) (at int, ok bool) {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r, isU := escapedRune(b, i)
		if !isU {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		switch {
		case 0xDC00 <= r && r <= 0xDFFF:
			return i, false
		case 0xD800 <= r && r <= 0xDBFF:
			if low, isLow := escapedRune(b, i+6); !isLow || low < 0xDC00 || low > 0xDFFF {
				return i, false
			}
			i += 11 // the pair's two escapes
		default:
			i += 5
		}
	}
	return 0, true
}

// escapedRune decodes the \uXXXX escape at b[i:], if there is one.
func escapedRune(b []byte, i int) (rune, bool) {
	if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, c := range b[i+2 : i+6] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
