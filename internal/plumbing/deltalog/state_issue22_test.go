package deltalog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A bad record with records after it is damage, not a torn last line:
// Read reports it (*CorruptError) with the records before it, and the
// first Append after Open keeps the records after it in a copy set
// aside instead of truncating them away. (Issue 22, defect 8.)
func TestCorruptRecordMidLogIsReportedAndKept(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.log")
	l, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for k, p := range []string{"one", "two", "three"} {
		if err := l.Append(uint64(k+1), []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	data, _ := os.ReadFile(path)
	orig := bytes.Clone(data)
	i := bytes.Index(data, []byte("two"))
	data[i] = 'T' // the checksum of record 2 no longer matches
	os.WriteFile(path, data, 0o600)

	recs, _, err := Read(path)
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("Read of a log with a bad middle record: err = %v, want a *CorruptError", err)
	}
	if got := keys(recs); len(got) != 1 || got[0] != "1=one" {
		t.Errorf("Read returned %v, want the records before the bad one, [1=one]", got)
	}

	l, _, err = Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := l.Append(4, []byte("four")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	aside := l.SetAside()
	if aside == "" {
		t.Fatal("Open set nothing aside")
	}
	kept, err := os.ReadFile(aside)
	if err != nil || !bytes.Equal(kept, data) {
		t.Errorf("the records after the bad one are not kept in %s (%v): %q", aside, err, kept)
	}

	// A torn LAST line is still only dropped.
	torn := filepath.Join(dir, "torn.log")
	os.WriteFile(torn, append(bytes.Clone(orig), []byte("4 0000000 xx\n")...), 0o600)
	if recs, _, err := Read(torn); err != nil || len(recs) != 3 {
		t.Errorf("Read of a torn last line = %v, %v; want the 3 records, no error", keys(recs), err)
	}
}

// After a failed append, a base older than the newest acknowledged record
// must not be written over it: a compaction that read an older document
// would take back a write that returned success. (Issue 22, defect 9.)
func TestWriteBaseRefusesOlderThanAcknowledged(t *testing.T) {
	dir := t.TempDir()
	base, logp := filepath.Join(dir, "doc"), filepath.Join(dir, "doc.log")
	if err := os.WriteFile(base, []byte("gen1"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(base, logp, 1, 4, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(2, []byte("to2")); err != nil {
		t.Fatal(err)
	}
	// An append fails: the store wants a base.
	s.log.mu.Lock()
	s.log.f.Close() // the next write fails
	s.log.mu.Unlock()
	if err := s.Append(3, []byte("to3")); err == nil {
		t.Fatal("Append on a closed file succeeded")
	}
	s.log.mu.Lock()
	s.log.f = nil
	s.log.mu.Unlock()
	// A slow compaction of generation 1 arrives.
	if err := s.WriteBase(1, []byte("gen1")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	b, recs, err := ReadStore(base, logp)
	if err != nil {
		t.Fatal(err)
	}
	served := string(b)
	for _, r := range recs {
		if r.Key > 1 {
			served = "gen" + string(rune('0'+r.Key))
		}
	}
	if served != "gen2" {
		t.Errorf("after a failed append and a compaction of generation 1, a restart serves %s (base %q, records %v), want gen2 (acknowledged)", served, b, keys(recs))
	}
}

// A frozen store (a handover: the successor owns the files) writes
// nothing, a compaction included, and Freeze waits for a write under way.
// (Issue 22, defect 10.)
func TestFrozenStoreWritesNothing(t *testing.T) {
	dir := t.TempDir()
	base, logp := filepath.Join(dir, "doc"), filepath.Join(dir, "doc.log")
	s, err := OpenStore(base, logp, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBase(1, []byte("gen1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(2, []byte("to2")); err != nil {
		t.Fatal(err)
	}
	s.Freeze()
	// The successor writes its own files.
	os.WriteFile(base, []byte("successor gen5"), 0o600)
	os.WriteFile(logp, nil, 0o600)
	if err := s.WriteBase(3, []byte("gen3")); !errors.Is(err, ErrFrozen) {
		t.Errorf("WriteBase of a frozen store = %v, want ErrFrozen", err)
	}
	if err := s.Append(3, []byte("to3")); !errors.Is(err, ErrFrozen) {
		t.Errorf("Append of a frozen store = %v, want ErrFrozen", err)
	}
	if b, _ := os.ReadFile(base); string(b) != "successor gen5" {
		t.Errorf("the predecessor overwrote the successor's base: %q", b)
	}
	if b, _ := os.ReadFile(logp); len(b) != 0 {
		t.Errorf("the predecessor wrote the successor's log: %q", b)
	}
	s.Thaw()
	if err := s.Append(3, []byte("to3")); err != nil {
		t.Errorf("Append after Thaw: %v", err)
	}
}
