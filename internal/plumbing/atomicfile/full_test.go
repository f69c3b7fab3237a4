package atomicfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/meshhost/meshhost/internal/testkit/fullfs"
)

// The tests below write on a real full file system: a small tmpfs mounted
// for the test (root only; they skip otherwise, and fail under CI=true).

// checkFailed checks that a Write of path that failed for want of space
// says so and names path, and left old in place and no temporary file.
func checkFailed(t *testing.T, err error, dir, path string, old []byte) {
	t.Helper()
	if err == nil {
		t.Fatal("Write on a full file system = nil error")
	}
	t.Logf("Write on a full file system: %v", err)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("error %q: want ENOSPC, naming %s and saying \"no space left on device\"", err, path)
	}
	if strings.Contains(err.Error(), ".tmp-") {
		t.Errorf("error %q names the temporary file; want the file written", err)
	}
	got, rerr := os.ReadFile(path)
	if rerr != nil || !bytes.Equal(got, old) {
		t.Errorf("after the failed Write the file holds %q (%v), want the old content %q", got, rerr, old)
	}
	if !json.Valid(got) {
		t.Errorf("after the failed Write the file does not parse: %q", got)
	}
	if tmps := fullfs.TempFiles(t, dir); len(tmps) != 0 {
		t.Errorf("temporary files left behind: %v", tmps)
	}
}

// TestWriteOnFullFileSystem: with no block free, and with a few pages free
// (so the write fails part way), Write fails with an error naming the file
// and ENOSPC, the old content is intact and still parses, and no temporary
// file is left; once space is back the same Write succeeds.
func TestWriteOnFullFileSystem(t *testing.T) {
	dir := fullfs.Mount(t, 256<<10)
	path := filepath.Join(dir, "state.json")
	old := []byte(`{"generation": 1, "names": {"db.internal": ["10.0.0.5"]}}` + "\n")
	if err := Write(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	big := []byte(fmt.Sprintf(`{"generation": 2, "pad": %q}`, strings.Repeat("x", 64<<10)))
	for _, tc := range []struct {
		name  string
		leave int64 // bytes left free
		data  []byte
	}{
		{"no block free, one byte", 0, []byte("2")},
		{"no block free, 64 KiB", 0, big},
		{"two pages free, 64 KiB (fails part way)", 8 << 10, big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := fullfs.Fill(t, dir, tc.leave)
			defer release()
			t.Logf("%d bytes free", fullfs.Free(t, dir))
			checkFailed(t, Write(path, tc.data, 0o600), dir, path, old)
			if got := fullfs.Names(t, dir); !slices.Equal(got, []string{"state.json"}) {
				t.Errorf("the directory holds %v, want only state.json", got)
			}
		})
	}
	// Space is back: the write goes through, and leaves nothing else.
	if err := Write(path, big, 0o600); err != nil {
		t.Fatalf("Write once space is back = %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, big) {
		t.Error("after space came back the file does not hold the new content")
	}
	if got := fullfs.Names(t, dir); !slices.Equal(got, []string{"state.json"}) {
		t.Errorf("the directory holds %v, want only state.json", got)
	}
}

// TestWriteWithoutInodes: a file system out of inodes (its blocks free)
// cannot even make the temporary file; the error names the file and ENOSPC,
// and the old content stays.
func TestWriteWithoutInodes(t *testing.T) {
	dir := fullfs.Mount(t, 1<<20, "nr_inodes=16")
	path := filepath.Join(dir, "state.json")
	old := []byte(`{"generation": 1}`)
	if err := Write(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	var n int
	for ; ; n++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fill-%d", n)))
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil || n > 1000 {
			t.Fatalf("filling the inodes: %d files, %v", n, err)
		}
		f.Close()
	}
	t.Logf("%d files took every inode", n)
	checkFailed(t, Write(path, []byte(`{"generation": 2}`), 0o600), dir, path, old)
	os.Remove(filepath.Join(dir, "fill-0"))
	if err := Write(path, []byte(`{"generation": 2}`), 0o600); err != nil {
		t.Fatalf("Write with an inode free = %v", err)
	}
}
