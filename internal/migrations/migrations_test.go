package migrations

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoadRejectsMalformedSetsByName(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name  string
		files fstest.MapFS
		want  string
	}{
		{"bad file name", fstest.MapFS{"migrations/1_x.up.sql": file("x")}, "is not named"},
		{"gap", fstest.MapFS{"migrations/002_x.up.sql": file("x"), "migrations/002_x.down.sql": file("x")}, "version 1 is missing"},
		{"no down", fstest.MapFS{"migrations/001_x.up.sql": file("x")}, "needs both"},
		{"two names", fstest.MapFS{"migrations/001_x.up.sql": file("x"), "migrations/001_y.down.sql": file("x")}, "two names"},
	}
	for _, tt := range tests {
		if _, err := Load(tt.files); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Load = %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

func TestDumpFillsPlaceholdersInDirectionOrder(t *testing.T) {
	t.Parallel()
	ms, err := Load(fstest.MapFS{
		"migrations/001_create.up.sql":   {Data: []byte("CREATE TABLE {{table}} (CONSTRAINT {{name:pkey}} ...);")},
		"migrations/001_create.down.sql": {Data: []byte("DROP TABLE {{table}};")},
		"migrations/002_index.up.sql":    {Data: []byte("CREATE INDEX {{name:idx}} ON {{table}} (x);")},
		"migrations/002_index.down.sql":  {Data: []byte("DROP INDEX {{name:idx}};")},
	})
	if err != nil {
		t.Fatal(err)
	}
	quote := func(s string) string { return `"` + s + `"` }
	fill := func(sql string) string {
		return Substitute(sql, map[string]string{"table": `"app"."outbox"`}, "outbox", quote)
	}
	up := Dump(ms, DirectionUp, fill)
	want := "-- 001_create.up.sql\nCREATE TABLE \"app\".\"outbox\" (CONSTRAINT \"outbox_pkey\" ...);\n-- 002_index.up.sql\nCREATE INDEX \"outbox_idx\" ON \"app\".\"outbox\" (x);\n"
	if up != want {
		t.Fatalf("Dump(up) =\n%s\nwant\n%s", up, want)
	}
	if down := Dump(ms, DirectionDown, fill); !strings.HasPrefix(down, "-- 002_index.down.sql\nDROP INDEX \"outbox_idx\";") {
		t.Fatalf("Dump(down) = %q, want version 2 first", down)
	}
}
