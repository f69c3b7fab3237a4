package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for _, content := range []string{"first", "second"} {
		if err := Write(path, []byte(content), 0o600); err != nil {
			t.Fatalf("Write(%q) = %v", content, err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != content {
			t.Errorf("after Write(%q) the file holds %q", content, got)
		}
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(entries))
	}
}

func TestWriteFailureKeepsOldContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := Write(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory where the temporary file's rename must land fails the
	// rename; the old content must survive and no temporary stay behind.
	blocked := filepath.Join(dir, "blocked")
	os.Mkdir(blocked, 0o700)
	os.WriteFile(filepath.Join(blocked, "x"), nil, 0o600)
	if err := Write(blocked, []byte("new"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory = nil error")
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Errorf("old file holds %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("directory holds %d entries, want 2 (no temporary left)", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "f"), nil, 0o600); err == nil {
		t.Error("Write into a missing directory = nil error")
	}
}
