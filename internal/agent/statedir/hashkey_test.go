package statedir

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// TestLoadHashKeyStableAndPrivate: the key is made on first use, 0600,
// KeySize bytes; a restart reads the same key (the same hashes); another
// state directory (another machine) has another key (other hashes).
func TestLoadHashKeyStableAndPrivate(t *testing.T) {
	const value = "s3cr3t-hunter2"
	d := New(t.TempDir())
	k1, err := d.LoadHashKey()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(d.HashKey())
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("hash key mode %o, want 600", m)
	}
	if fi.Size() != digest.KeySize {
		t.Errorf("hash key of %d bytes, want %d", fi.Size(), digest.KeySize)
	}
	k2, err := New(d.Path()).LoadHashKey() // a restart
	if err != nil {
		t.Fatal(err)
	}
	if k1.ValueHash(value) != k2.ValueHash(value) {
		t.Errorf("hash key not stable across restarts: %s then %s", k1.ValueHash(value), k2.ValueHash(value))
	}
	k3, err := New(t.TempDir()).LoadHashKey()
	if err != nil {
		t.Fatal(err)
	}
	r := spec.Rendered{Container: spec.Container{Name: "db", Image: "i", Env: map[string]string{"DB_PASSWORD": value}}}
	if k1.Record(r) != k2.Record(r) {
		t.Error("a restart makes another record for the same value")
	}
	if k1.Record(r) == k3.Record(r) {
		t.Error("two machines' keys make the same record for the same value")
	}
	entries, _ := os.ReadDir(d.Path())
	if len(entries) != 1 {
		t.Errorf("state directory holds %d entries, want only hash.key (no temporary left)", len(entries))
	}
}

// TestLoadHashKeyAtOnce: processes making the key at the same time all end
// with the same one.
func TestLoadHashKeyAtOnce(t *testing.T) {
	d := New(t.TempDir())
	var wg sync.WaitGroup
	hashes := make([]string, 8)
	for i := range hashes {
		wg.Go(func() {
			k, err := New(d.Path()).LoadHashKey()
			if err != nil {
				t.Error(err)
				return
			}
			hashes[i] = k.ValueHash("v")
		})
	}
	wg.Wait()
	for _, h := range hashes {
		if h != hashes[0] {
			t.Fatalf("keys made at once differ: %v", hashes)
		}
	}
}

// TestLoadHashKeyRefusesADamagedKey: a short key file is refused, naming the
// file and the fix, not replaced behind the operator's back.
func TestLoadHashKeyRefusesADamagedKey(t *testing.T) {
	d := New(t.TempDir())
	if err := os.WriteFile(d.HashKey(), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := d.LoadHashKey()
	if err == nil || !strings.Contains(err.Error(), d.HashKey()) || !strings.Contains(err.Error(), "remove it") {
		t.Errorf("LoadHashKey of a 5-byte key = %v, want an error naming the file and the fix", err)
	}
}
