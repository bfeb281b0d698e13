package headerjson

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDecode feeds arbitrary bytes to the decoder of stored headers, and
// arbitrary headers through the encoding the stores write (encoding/json's
// Marshal, kept as is in SQLite and normalised by PostgreSQL's jsonb). Decode
// must never panic, return exactly the headers that were encoded, and reject
// what is not a JSON object of strings instead of returning fewer headers or
// changed ones.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"content-type":"application/json","x-seq":"1"}`), "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add([]byte(`{"a": "b", "bb": "\u00e9\ud83d\ude00"}`), "emoji", "😀 ünïcödé 中文 \u2028 <&>")
	f.Add([]byte(`null`), "", "")
	f.Add([]byte(`{}`), "empty-value", "")
	f.Add([]byte(``), "k", "\x00\x01\x7f\"\\")
	f.Add([]byte(`{"a":1}`), "k", "v")
	f.Add([]byte(`["a","b"]`), "k", "v")
	f.Add([]byte(`"a"`), "k", "v")
	f.Add([]byte(`{"a":"b"} {}`), "k", "v")
	f.Add([]byte(`{"a":"b","a":"c"}`), "k", "v")
	f.Add([]byte(`{"a":"\ud800"}`), "k", "v")
	f.Add([]byte(`{"a":"\udc00\ud800x"}`), "k", "v")
	f.Add([]byte(`{"a":"\\ud800"}`), "k", "v")
	f.Add([]byte("{\"a\":\"\xff\"}"), "k", "\xff")
	f.Add([]byte("{\"a\":\"\xef\xbf\xbd\"}"), "k", "\ufffd")
	f.Add([]byte(`{"a":null}`), "k", "v")
	f.Add([]byte("a\nb\nc\nd"), strings.Repeat("k", 255), strings.Repeat("value ", 20000))
	f.Fuzz(func(t *testing.T, b []byte, name, value string) {
		checkDecode(t, b)

		h := map[string]string{name: value}
		for pair := range slices.Chunk(strings.Split(string(b), "\n"), 2) {
			if len(pair) == 2 {
				h[pair[0]] = pair[1]
			}
		}
		for k, v := range h {
			if !utf8.ValidString(k) || !utf8.ValidString(v) {
				return // Message validation rejects these before any store
			}
		}
		written, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("encode %q: %v", h, err)
		}
		for _, stored := range [][]byte{written, likeJSONB(h)} {
			got, err := Decode(stored)
			if err != nil {
				t.Fatalf("Decode(%q), encoded from %q: %v", stored, h, err)
			}
			if !maps.Equal(got, h) {
				t.Fatalf("Decode(%q) = %q, want %q", stored, got, h)
			}
		}
	})
}

// checkDecode decodes arbitrary bytes: it must not panic, and what it accepts
// must be JSON that holds those very headers.
func checkDecode(t *testing.T, b []byte) {
	t.Helper()
	h, err := Decode(b)
	if err != nil {
		if h != nil || err.Error() == "" {
			t.Fatalf("Decode(%q) = %q, %v; want no headers with a reason", b, h, err)
		}
		return
	}
	if !json.Valid(b) {
		t.Fatalf("Decode(%q) accepted invalid JSON as %q", b, h)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		t.Fatal(err)
	}
	switch c := compact.String(); {
	case h == nil && c != "null":
		t.Fatalf("Decode(%q) = nil without error; only null means no headers", b)
	case h != nil && len(h) == 0 && c != "{}":
		t.Fatalf("Decode(%q) = an empty map without error", b)
	}
	// Each header is a string of the object, null included: encoding/json
	// leaves a null where the object has one.
	var object map[string]any
	if err := json.Unmarshal(b, &object); err != nil || len(object) != len(h) {
		t.Fatalf("Decode(%q) = %q, but the JSON object is %v (%v)", b, h, object, err)
	}
	for k, v := range object {
		if s, ok := v.(string); !ok || s != h[k] {
			t.Fatalf("Decode(%q) = %q, but %q is %#v in the JSON", b, h, k, v)
		}
	}
	// U+FFFD comes out only if it went in: nothing was replaced.
	hasFFFD := bytes.Contains(b, []byte("\ufffd")) || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`))
	for k, v := range h {
		if !hasFFFD && (strings.ContainsRune(k, utf8.RuneError) || strings.ContainsRune(v, utf8.RuneError)) {
			t.Fatalf("Decode(%q) replaced characters: %q: %q", b, k, v)
		}
	}
	// What was decoded survives being written again.
	again, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(again); err != nil || !maps.Equal(got, h) {
		t.Fatalf("Decode(%q) = %q, but once written again as %q it decodes to %q, %v", b, h, again, got, err)
	}
}

// likeJSONB renders h as PostgreSQL prints a jsonb object: keys ordered by
// length then bytes, ", " and ": " between items, only '"', '\' and control
// characters escaped.
func likeJSONB(h map[string]string) []byte {
	keys := slices.SortedFunc(maps.Keys(h), func(a, b string) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		quoteLikePostgres(&b, k)
		b.WriteString(": ")
		quoteLikePostgres(&b, h[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

func quoteLikePostgres(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
