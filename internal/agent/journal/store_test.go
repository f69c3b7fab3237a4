package journal_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/internal/testkit/fullfs"
)

// passGens returns the generations of the pass entries j holds, in order.
func passGens(t *testing.T, j *journal.Journal) []uint64 {
	t.Helper()
	ps, err := j.Passes()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, p := range ps {
		out = append(out, p.Generation)
	}
	return out
}

func seq(from, to uint64) []uint64 {
	var out []uint64
	for g := from; g <= to; g++ {
		out = append(out, g)
	}
	return out
}

// TestJournalAppendsToSegments: entries go to segments of a quarter of
// Keep, not to a file each; pruning drops whole segments, keeping at least
// Keep entries and at most a segment more; a reopened journal goes on
// appending to its newest segment.
func TestJournalAppendsToSegments(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{Keep: 8}) // segments of 2
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 7; g++ {
		if _, err := j.RecordPass(journal.PassEntry{Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	if got := fullfs.Names(t, filepath.Join(dir, "passes")); len(got) != 4 {
		t.Errorf("7 passes are in %v, want 4 segments of up to 2", got)
	}
	// Reopened (the agent restarted): the 8th goes into the 4th segment.
	j, _ = journal.Open(dir, journal.Options{Keep: 8})
	if _, err := j.RecordPass(journal.PassEntry{Generation: 8}); err != nil {
		t.Fatal(err)
	}
	if got := fullfs.Names(t, filepath.Join(dir, "passes")); len(got) != 4 {
		t.Errorf("8 passes are in %v, want 4 segments of 2", got)
	}
	for g := uint64(9); g <= 30; g++ {
		if _, err := j.RecordPass(journal.PassEntry{Generation: g}); err != nil {
			t.Fatal(err)
		}
		got := passGens(t, j)
		if n := len(got); n < 8 || n > 9 || got[n-1] != g {
			t.Fatalf("after pass %d the journal holds %v: want the newest 8, or 9", g, got)
		}
		if !slices.Equal(got, seq(got[0], g)) {
			t.Fatalf("after pass %d the journal holds %v: not a run of passes", g, got)
		}
	}
	ps, _ := j.Passes()
	if p := ps[len(ps)-1]; p.Seq != 30 || p.Version != journal.Version {
		t.Errorf("the last pass is seq %d version %d, want 30 and %d", p.Seq, p.Version, journal.Version)
	}
}

// TestJournalReadsOlderEntryFiles: a journal of version 3 (an entry a
// file) upgraded in place reads its entries with the new ones, finds
// each by key, refuses an older generation, and prunes the old files
// first.
func TestJournalReadsOlderEntryFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := journal.Open(dir, journal.Options{}); err != nil { // makes the directories
		t.Fatal(err)
	}
	for g := uint64(1); g <= 3; g++ {
		e := journal.DeclarationEntry{Version: 3, Time: time.Unix(int64(g), 0).UTC(), Machine: "hub", Generation: g, RosterGeneration: g}
		data, _ := json.Marshal(e)
		if err := os.WriteFile(filepath.Join(dir, "declarations", fmt.Sprintf("%020d.json", g)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	j, err := journal.Open(dir, journal.Options{Keep: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.RecordDeclaration(declaration(2, 2, nil), journal.Diff{}, time.Now()); !errors.Is(err, journal.ErrOlderGeneration) {
		t.Errorf("recording generation 2 over version 3 entries up to 3: %v, want ErrOlderGeneration", err)
	}
	if e, err := j.RecordDeclaration(declaration(3, 3, nil), journal.Diff{}, time.Now()); err != nil || e.Version != 3 {
		t.Errorf("recording generation 3 again = version %d, %v; want the version 3 entry as it is", e.Version, err)
	}
	for g := uint64(4); g <= 6; g++ {
		if _, err := j.RecordDeclaration(declaration(g, g, nil), journal.Diff{From: g - 1, To: g}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	decls, err := j.Declarations()
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	for _, d := range decls {
		gens = append(gens, d.Generation)
	}
	if !slices.Equal(gens, []uint64{3, 4, 5, 6}) {
		t.Errorf("declarations held = %v, want 3 (a version 3 file) to 6", gens)
	}
	for _, g := range []uint64{3, 5} {
		if d, err := j.Declaration(g); err != nil && !strings.Contains(err.Error(), "summary only") || d != nil && d.Generation != g {
			t.Errorf("Declaration(%d) = %v, %v", g, d, err)
		}
	}
	if _, err := j.Declaration(1); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("Declaration(1), pruned: %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "declarations", fmt.Sprintf("%020d.json", 2))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the version 3 file of declaration 2 is still there (%v): pruning starts with the oldest", err)
	}
}

// TestJournalDropsATornEntry: a crash in the middle of an append leaves
// part of a line; readers leave it out, and the next entry is whole after
// it (the torn part cut off), in this process and in a reopened one.
func TestJournalDropsATornEntry(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 2; g++ {
		if _, err := j.RecordPass(journal.PassEntry{Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	segs := fullfs.Names(t, filepath.Join(dir, "passes"))
	if len(segs) != 1 {
		t.Fatalf("passes in %v, want one segment", segs)
	}
	seg := filepath.Join(dir, "passes", segs[0])
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`3 0badc0de {"version":4,"seq":3,"gener`)
	f.Close()
	if got := passGens(t, j); !slices.Equal(got, []uint64{1, 2}) {
		t.Errorf("with a torn third entry the journal reads %v, want 1 2", got)
	}
	j, _ = journal.Open(dir, journal.Options{})
	if p, err := j.RecordPass(journal.PassEntry{Generation: 3}); err != nil || p.Seq != 3 {
		t.Fatalf("RecordPass after the tear = seq %d, %v; want 3", p.Seq, err)
	}
	if got := passGens(t, j); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("after the tear and one more pass the journal reads %v, want 1 2 3", got)
	}
}

// TestJournalOnFullDisk: a write on a full disk fails with ENOSPC and
// leaves the journal as it was (its files unchanged, what was recorded
// read the same, nothing half-written read), whether it appends to a
// segment (failing part way) or starts one; once space is back the next
// write goes through.
func TestJournalOnFullDisk(t *testing.T) {
	dir := fullfs.Mount(t, 256<<10)
	j, err := journal.Open(dir, journal.Options{Keep: 8}) // segments of 2
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 3; g++ {
		if _, err := j.RecordPass(journal.PassEntry{Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 16<<10) // pages more than the segment has: fails part way
	for _, tc := range []struct {
		name string
		pass journal.PassEntry
	}{
		{"an append to the second segment, failing part way", journal.PassEntry{Generation: 4, Actions: []journal.Action{{Kind: "replace", Err: big}}}},
		{"a third segment", journal.PassEntry{Generation: 5}},
	} {
		held := passGens(t, j)
		before := fullfs.Snapshot(t, filepath.Join(dir, "passes"))
		release := fullfs.Fill(t, dir, 0)
		if _, err := j.RecordPass(tc.pass); !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%s on a full disk: %v, want ENOSPC", tc.name, err)
		}
		if got := passGens(t, j); !slices.Equal(got, held) {
			t.Errorf("after %s failed the journal reads %v, want %v", tc.name, got, held)
		}
		if after := fullfs.Snapshot(t, filepath.Join(dir, "passes")); !maps.Equal(before, after) {
			t.Errorf("%s failed and changed the journal's files:\nbefore %v\nafter  %v", tc.name, slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
		}
		release()
		if _, err := j.RecordPass(journal.PassEntry{Generation: tc.pass.Generation}); err != nil {
			t.Fatalf("%s once space is back: %v", tc.name, err)
		}
	}
	j, _ = journal.Open(dir, journal.Options{Keep: 8})
	if got := passGens(t, j); !slices.Equal(got, []uint64{1, 2, 3, 4, 5}) {
		t.Errorf("reopened, the journal reads %v, want 1 to 5", got)
	}
	if got := fullfs.Names(t, filepath.Join(dir, "passes")); len(got) != 3 {
		t.Errorf("passes are in %v, want 3 segments", got)
	}
}

// TestJournalReadWhileWriting: an operator command reading the journal
// (another Journal on the same directory, as `meshhost history` is)
// while the agent appends and prunes always reads a run of whole entries
// ending at one the agent wrote, never an error.
func TestJournalReadWhileWriting(t *testing.T) {
	dir := t.TempDir()
	w, err := journal.Open(dir, journal.Options{Keep: 8})
	if err != nil {
		t.Fatal(err)
	}
	r, err := journal.Open(dir, journal.Options{Keep: 8})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		for g := uint64(1); g <= 300; g++ {
			if _, err := w.RecordPass(journal.PassEntry{Generation: g}); err != nil {
				done <- err
				return
			}
		}
		close(done)
	}()
	reads := 0
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d reads while 300 passes were recorded", reads)
			return
		default:
		}
		ps, err := r.Passes()
		if err != nil {
			t.Fatalf("reading while the agent writes: %v", err)
		}
		reads++
		for i := 1; i < len(ps); i++ {
			if ps[i].Generation != ps[i-1].Generation+1 {
				t.Fatalf("read %d: passes %d then %d: not a run", reads, ps[i-1].Generation, ps[i].Generation)
			}
		}
	}
}

// TestJournalReadsPastACorruptEntry: a checksum failure in the middle of
// a segment (not a torn last line) fails no read and cuts nothing off:
// the entries before and after it are read, in this process and in a
// reopened one; the segment is copied aside (PATH.corrupt-TIME) and kept
// byte for byte, and the next entry goes to a new segment (issue 22,
// defect 8, for the journal).
func TestJournalReadsPastACorruptEntry(t *testing.T) {
	dir := t.TempDir()
	j, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for g := uint64(1); g <= 5; g++ {
		if _, err := j.RecordPass(journal.PassEntry{Generation: g}); err != nil {
			t.Fatal(err)
		}
	}
	segs := fullfs.Names(t, filepath.Join(dir, "passes"))
	if len(segs) != 1 {
		t.Fatalf("passes in %v, want one segment", segs)
	}
	seg := filepath.Join(dir, "passes", segs[0])
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	// Entry 3's generation, 3 -> 9: its checksum no longer matches.
	lines := strings.SplitAfter(string(data), "\n")
	lines[2] = strings.Replace(lines[2], `"generation":3`, `"generation":9`, 1)
	damaged := strings.Join(lines, "")
	if damaged == string(data) {
		t.Fatal("the test did not damage the entry")
	}
	if err := os.WriteFile(seg, []byte(damaged), 0o600); err != nil {
		t.Fatal(err)
	}
	want := []uint64{1, 2, 4, 5}
	if got, err := j.Passes(); err != nil {
		t.Fatalf("Passes with a corrupt middle entry: %v", err)
	} else if g := gensOf(got); !slices.Equal(g, want) {
		t.Errorf("with a corrupt third entry the journal reads %v, want %v", g, want)
	}
	j2, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatalf("reopening a journal with a corrupt middle entry: %v", err)
	}
	if p, err := j2.RecordPass(journal.PassEntry{Generation: 6}); err != nil || p.Seq != 6 {
		t.Fatalf("RecordPass after the damage = seq %d, %v; want 6", p.Seq, err)
	}
	if got := passGens(t, j2); !slices.Equal(got, append(want, 6)) {
		t.Errorf("after one more pass the journal reads %v, want %v", got, append(want, 6))
	}
	if after, _ := os.ReadFile(seg); string(after) != damaged {
		t.Errorf("the damaged segment was changed:\n%s\nwant\n%s", after, damaged)
	}
	aside, _ := filepath.Glob(seg + ".corrupt-*")
	if len(aside) != 1 {
		t.Fatalf("set aside: %v, want one copy of %s", aside, seg)
	}
	if c, _ := os.ReadFile(aside[0]); string(c) != damaged {
		t.Errorf("the copy set aside differs from the damaged segment")
	}
}

func gensOf(ps []journal.PassEntry) []uint64 {
	var out []uint64
	for _, p := range ps {
		out = append(out, p.Generation)
	}
	return out
}
