package outbox_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-outbox/outbox"
	"github.com/google/uuid"
)

func TestADirBlobStorePutsGetsAndDeletesABlob(t *testing.T) {
	t.Parallel()
	blobs := outbox.DirBlobStore(filepath.Join(t.TempDir(), "made", "at", "first", "put"))
	ctx := t.Context()
	if err := blobs.Delete(ctx, "never-put"); err != nil {
		t.Fatalf("Delete of a key never put: %v; want nil", err)
	}
	if _, err := blobs.Get(ctx, "never-put"); !errors.Is(err, outbox.ErrBlobNotFound) {
		t.Fatalf("Get of a key never put: %v; want ErrBlobNotFound", err)
	}
	for _, data := range [][]byte{[]byte("first"), payloadOf(1<<20, 9), {}} {
		if err := blobs.Put(ctx, "a/b", data); err != nil {
			t.Fatalf("Put: %v", err)
		}
		got, err := blobs.Get(ctx, "a/b")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after a Put of %d bytes: %d bytes, %v; want them back", len(data), len(got), err)
		}
	}
	if err := blobs.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := blobs.Get(ctx, "a/b"); !errors.Is(err, outbox.ErrBlobNotFound) {
		t.Fatalf("Get after Delete: %v; want ErrBlobNotFound", err)
	}
}

func TestADirBlobStoreKeepsEveryKeyInsideItsDirectoryAsOneFileAndNoTemporaryFile(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "blobs")
	blobs := outbox.DirBlobStore(dir)
	keys := []string{"../escape", "..", ".", ".hidden", "/abs/path", `back\slash`, "a%2Fb", "a/b", "sp ace", "ünï"}
	for i, key := range keys {
		if err := blobs.Put(t.Context(), key, []byte{byte(i)}); err != nil {
			t.Fatalf("Put %q: %v", key, err)
		}
	}
	for i, key := range keys {
		if got, err := blobs.Get(t.Context(), key); err != nil || !bytes.Equal(got, []byte{byte(i)}) {
			t.Fatalf("Get %q: %v, %v; want its own blob, not another key's", key, got, err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(keys) {
		t.Fatalf("%d keys made %d files; want one each", len(keys), len(entries))
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			t.Fatalf("file %q in the blob directory: want no hidden or temporary file", e.Name())
		}
	}
	if outside, _ := os.ReadDir(parent); len(outside) != 1 {
		t.Fatalf("the blob directory's parent holds %d entries; want only the directory", len(outside))
	}
}

func TestADirBlobStoreRefusesKeysNoFileCanBePermanently(t *testing.T) {
	t.Parallel()
	blobs := outbox.DirBlobStore(t.TempDir())
	for _, key := range []string{"", strings.Repeat("k", 256), strings.Repeat("/", 100)} {
		if err := blobs.Put(t.Context(), key, []byte("x")); !outbox.IsPermanent(err) {
			t.Errorf("Put of a %d-byte key: %v; want a permanent error", len(key), err)
		}
	}
}

// Sweep deletes the old blobs of its prefix and stale temporary files, and
// nothing else: not the new blobs, not another prefix's old blobs, not an
// old file of another kind (a database beside the blobs).
func TestSweepDeletesTheOldBlobsOfItsPrefixAndNoOtherFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blobs := outbox.DirBlobStore(dir)
	cfg, other := outbox.ClaimCheckConfig{}, outbox.ClaimCheckConfig{Prefix: "billing/"}
	oldID, newID, otherID := uuid.New(), uuid.New(), uuid.New()
	for _, key := range []string{cfg.Key(oldID), cfg.Key(newID), other.Key(otherID)} {
		if err := blobs.Put(t.Context(), key, []byte(key)); err != nil {
			t.Fatal(err)
		}
	}
	// A temporary file a crashed Put left behind, and the application's
	// database in the same directory.
	for _, name := range []string{".put-123", "app.db"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-48 * time.Hour)
	for _, name := range []string{"outbox-claim-check%2F" + oldID.String(), "billing%2F" + otherID.String(), ".put-123", "app.db"} {
		if err := os.Chtimes(filepath.Join(dir, name), long, long); err != nil {
			t.Fatal(err)
		}
	}
	n, err := blobs.Sweep(t.Context(), "", 24*time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("Sweep: %d, %v; want the old blob and the stale temporary file deleted", n, err)
	}
	if _, err := blobs.Get(t.Context(), cfg.Key(oldID)); !errors.Is(err, outbox.ErrBlobNotFound) {
		t.Fatalf("the old blob after Sweep: %v; want it gone", err)
	}
	for _, key := range []string{cfg.Key(newID), other.Key(otherID)} {
		if _, err := blobs.Get(t.Context(), key); err != nil {
			t.Fatalf("blob %s after Sweep: %v; want it kept (new, or of another prefix)", key, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "app.db")); err != nil {
		t.Fatalf("the database beside the blobs after Sweep: %v; want it untouched", err)
	}
	if n, err := outbox.DirBlobStore(filepath.Join(dir, "missing")).Sweep(t.Context(), "", 0); n != 0 || err != nil {
		t.Fatalf("Sweep of a missing directory: %d, %v; want nothing to do", n, err)
	}
}

// A Sweep that died after moving a blob aside is finished by the next: a
// blob put again meanwhile (new) goes back under its key, an old one is
// deleted. Another prefix's blob moved aside is left to its own sweep.
func TestSweepFinishesTheWorkOfASweepThatDiedHalfWay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blobs := outbox.DirBlobStore(dir)
	cfg := outbox.ClaimCheckConfig{}
	fresh, old, other := uuid.New(), uuid.New(), uuid.New()
	long := time.Now().Add(-48 * time.Hour)
	for name, mtime := range map[string]time.Time{
		".put-sweep-outbox-claim-check%2F" + fresh.String(): time.Now(),
		".put-sweep-outbox-claim-check%2F" + old.String():   long,
		".put-sweep-billing%2F" + other.String():            long,
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("blob"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := blobs.Sweep(t.Context(), "", 24*time.Hour); err != nil || n != 1 {
		t.Fatalf("Sweep: %d, %v; want the old blob moved aside deleted, and nothing else", n, err)
	}
	if got, err := blobs.Get(t.Context(), cfg.Key(fresh)); err != nil || string(got) != "blob" {
		t.Fatalf("the new blob a dead Sweep moved aside: %q, %v; want it back under its key", got, err)
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range names {
		left = append(left, e.Name())
	}
	slices.Sort(left)
	want := []string{".put-sweep-billing%2F" + other.String(), "outbox-claim-check%2F" + fresh.String()}
	if !slices.Equal(left, want) {
		t.Fatalf("files after Sweep: %v; want %v", left, want)
	}
}
