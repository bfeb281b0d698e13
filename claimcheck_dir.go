package outbox

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
)

// DirBlobStore is a BlobStore that keeps each blob in a file of the
// directory it names, for development and tests on one machine (a relay and
// its consumers sharing a disk); outboxs3 is the one for production. The
// directory is made at the first Put.
//
// A key becomes a file name with every byte other than letters, digits, '-',
// '_' and '.' (and a leading '.') written as %XX, so "outbox-claim-check/ID"
// is the file "outbox-claim-check%2FID": no key reaches outside the
// directory, and none looks like a temporary file. A key whose file name
// would be over 255 bytes fails permanently. Put writes a temporary file,
// syncs it and renames it over the key's file, so a reader sees the old
// blob or the new one whole, never a part.
type DirBlobStore string

// dirTempPrefix starts the temporary files of Put; escaped keys never do.
const dirTempPrefix = ".put-"

// Delete removes the blob of key; a missing one is no error.
func (d DirBlobStore) Delete(ctx context.Context, key string) error {
	path, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("outbox: delete blob %q: %w", key, err)
	}
	return nil
}

// Get returns the blob of key, or an error matching ErrBlobNotFound.
func (d DirBlobStore) Get(ctx context.Context, key string) ([]byte, error) {
	path, err := d.path(key)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("outbox: blob %q in %s: %w", key, string(d), ErrBlobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("outbox: get blob %q: %w", key, err)
	}
	return data, nil
}

// Put stores data under key, replacing what was there.
func (d DirBlobStore) Put(ctx context.Context, key string, data []byte) error {
	path, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return fmt.Errorf("outbox: put blob %q: %w", key, err)
	}
	if err := writeFileAtomic(string(d), path, data); err != nil {
		return fmt.Errorf("outbox: put blob %q: %w", key, err)
	}
	return nil
}

// writeFileAtomic writes data to a temporary file in dir, syncs it, renames
// it to path and syncs dir. The temporary file is removed on failure.
func writeFileAtomic(dir, path string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, dirTempPrefix+"*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced: the relay puts a
	// blob once, then publishes the message that names it.
	return syncDir(dir)
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	dirFile, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer dirFile.Close()
	return dirFile.Sync()
}

// Sweep deletes the blobs of the claim check whose prefix is prefix
// (ClaimCheckConfig.Prefix; empty means ClaimCheckPrefixDefault) last
// written more than olderThan ago, and the temporary files of Puts that a
// crash left behind, and returns how many files it deleted: the retention
// of a DirBlobStore (S3 has lifecycle rules). It deletes no other file: only
// a file named for a key of that prefix followed by a message id, so a
// database or another claim check's blobs in the same directory are safe. A
// missing directory holds nothing to sweep.
//
// A blob put again while Sweep looks at it (a dead message retried after
// retention) is kept: Sweep moves the file aside before it deletes it, and
// moves it back if it turns out to be new; a Sweep that died between the
// two is finished by the next one. A consumer reading the blob in that
// instant gets ErrBlobNotFound, which its adapter retries.
func (d DirBlobStore) Sweep(ctx context.Context, prefix string, olderThan time.Duration) (int, error) {
	if prefix == "" {
		prefix = ClaimCheckPrefixDefault
	}
	entries, err := os.ReadDir(string(d))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("outbox: sweep blobs: %w", err)
	}
	escaped := escapeBlobKey(prefix)
	isBlob := func(name string) bool {
		id, ok := strings.CutPrefix(name, escaped)
		_, err := uuid.Parse(id)
		return ok && err == nil && len(id) == 36
	}
	before := time.Now().Add(-olderThan)
	n := 0
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		var deleted bool
		var err error
		switch blob, aside := strings.CutPrefix(name, dirSweepPrefix); {
		case aside && isBlob(blob):
			deleted, err = d.finishSweep(blob, before)
		case isBlob(name):
			deleted, err = d.sweepBlob(name, before)
		case strings.HasPrefix(name, dirTempPrefix) && !aside:
			deleted, err = d.removeIfOld(name, before)
		}
		if err != nil {
			return n, fmt.Errorf("outbox: sweep blobs: %w", err)
		}
		if deleted {
			n++
		}
	}
	return n, nil
}

// dirSweepPrefix starts the name of a blob Sweep moved aside: the blob's
// own file name follows, so that a later Sweep can finish the work.
const dirSweepPrefix = dirTempPrefix + "sweep-"

// removeIfOld deletes the file name of d if it was last written before
// before.
func (d DirBlobStore) removeIfOld(name string, before time.Time) (bool, error) {
	path := filepath.Join(string(d), name)
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !info.ModTime().Before(before) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}

// sweepBlob deletes the blob file name of d if it was last written before
// before. It moves the file aside first, so that a Put that renamed a new
// blob over it meanwhile is seen (finishSweep) and moved back rather than
// deleted.
func (d DirBlobStore) sweepBlob(name string, before time.Time) (bool, error) {
	info, err := os.Stat(filepath.Join(string(d), name))
	if errors.Is(err, fs.ErrNotExist) || err == nil && !info.ModTime().Before(before) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := os.Rename(filepath.Join(string(d), name), filepath.Join(string(d), dirSweepPrefix+name)); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return d.finishSweep(name, before)
}

// finishSweep ends the sweep of the blob file name, moved aside: deleted
// if it is old, moved back if it is new (put again meanwhile) and no newer
// blob took its place. Put writes the same bytes under a key every time,
// so either copy is the blob.
func (d DirBlobStore) finishSweep(name string, before time.Time) (bool, error) {
	aside := filepath.Join(string(d), dirSweepPrefix+name)
	info, err := os.Stat(aside)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if info.ModTime().Before(before) {
		if err := os.Remove(aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		return true, nil
	}
	path := filepath.Join(string(d), name)
	if _, err := os.Stat(path); err == nil {
		return false, os.Remove(aside) // a newer Put is in place
	}
	if err := os.Rename(aside, path); err != nil {
		return false, err
	}
	return false, syncDir(string(d))
}

// path returns the file of key in d.
func (d DirBlobStore) path(key string) (string, error) {
	if d == "" {
		return "", Permanent(errors.New(`outbox: DirBlobStore("") names no directory; name one, e.g. outbox.DirBlobStore("/var/lib/app/blobs")`))
	}
	name := escapeBlobKey(key)
	switch {
	case key == "":
		return "", Permanent(errors.New("outbox: empty blob key"))
	case len(name) > 255:
		return "", Permanent(fmt.Errorf("outbox: blob key %q is %d bytes as a file name; the limit is 255", shorten(key), len(name)))
	}
	return filepath.Join(string(d), name), nil
}

// escapeBlobKey returns key as a file name: letters, digits, '-', '_' and
// '.' (but a leading '.') as they are, every other byte as %XX.
func escapeBlobKey(key string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		plain := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' && i > 0
		if plain {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
