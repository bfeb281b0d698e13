package migrations

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
	"time"
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

func TestStatusesAndMarkApplied(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	list := Statuses([]Migration{{Version: 1, Name: "a"}, {Version: 2, Name: "b"}})
	list = MarkApplied(list, 1, "a", at)
	list = MarkApplied(list, 3, "from_newer_release", at)
	want := []Status{
		{Applied: true, AppliedAt: at, Known: true, Name: "a", Version: 1},
		{Known: true, Name: "b", Version: 2},
		{Applied: true, AppliedAt: at, Name: "from_newer_release", Version: 3},
	}
	if len(list) != len(want) {
		t.Fatalf("list = %+v, want %+v", list, want)
	}
	for i := range want {
		if list[i] != want[i] {
			t.Errorf("list[%d] = %+v, want %+v", i, list[i], want[i])
		}
	}
}

func TestCheckApplied(t *testing.T) {
	t.Parallel()
	for _, ok := range [][]int{nil, {1}, {1, 2, 3}} {
		if err := CheckApplied(ok, 3, "pkg", "t"); err != nil {
			t.Errorf("CheckApplied(%v) = %v, want nil", ok, err)
		}
	}
	if err := CheckApplied([]int{1, 2, 3, 4}, 3, "pkg", "t"); err == nil || !strings.Contains(err.Error(), "version 4, which this release of pkg does not know") {
		t.Errorf("unknown version: %v", err)
	}
	if err := CheckApplied([]int{1, 3}, 3, "pkg", "t"); err == nil || !strings.Contains(err.Error(), "t records versions [1 3]; expected 1 to 2 without gaps") {
		t.Errorf("gap: %v", err)
	}
}

func TestWalkStopsWhenNothingChangesOrOnError(t *testing.T) {
	t.Parallel()
	next := 0
	done, err := Walk(func() (int, bool, error) {
		if next == 3 {
			return 0, false, nil
		}
		next++
		return next, true, nil
	})
	if err != nil || len(done) != 3 || done[2] != 3 {
		t.Errorf("Walk = %v, %v; want [1 2 3]", done, err)
	}
	failed := errors.New("failed")
	calls := 0
	done, err = Walk(func() (int, bool, error) {
		if calls++; calls == 2 {
			return 0, false, failed
		}
		return 7, true, nil
	})
	if err != failed || len(done) != 1 || done[0] != 7 {
		t.Errorf("Walk failing at step 2 = %v, %v; want [7] and the error", done, err)
	}
}
