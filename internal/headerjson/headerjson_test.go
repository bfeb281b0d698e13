package headerjson

import (
	"maps"
	"strings"
	"testing"
)

func TestDecodeReturnsTheHeadersOfAJSONObjectOfStrings(t *testing.T) {
	t.Parallel()
	tests := map[string]map[string]string{
		`{"content-type":"application/json","x-seq":"1"}`: {"content-type": "application/json", "x-seq": "1"},
		`{"a": "\u00e9\ud83d\ude00 \\ud800", "b": ""}`:    {"a": "é😀 \\ud800", "b": ""},
		`{"a":"1","a":"2"}`:                               {"a": "2"},
		`{}`:                                              {},
		` null `:                                          nil,
	}
	for in, want := range tests {
		got, err := Decode([]byte(in))
		if err != nil || !maps.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("Decode(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestDecodeRejectsWhatItCannotReturnExactly(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		``:                     "not a JSON object",
		`{"a":1}`:              "not a JSON object",
		`["a"]`:                "not a JSON object",
		`{"a":"b"} x`:          "not a JSON object",
		`{"a":null}`:           `header "a" is null`,
		`{"a":"\ud800"}`:       `\ud800 at byte 6`,
		`{"a":"x\uDC00"}`:      `\uDC00 at byte 7`,
		"{\"a\":\"\xff\"}":     "not valid UTF-8",
		`{"a":"\ud800\u0041"}`: "half a UTF-16 surrogate pair",
	}
	for in, want := range tests {
		got, err := Decode([]byte(in))
		if err == nil || got != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %q, %v; want an error saying %q", in, got, err, want)
		}
	}
}
