package deltalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/testkit/fullfs"
)

func keys(rs []Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, fmt.Sprintf("%d=%s", r.Key, r.Payload))
	}
	return out
}

func TestAppendReadTrim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	l, recs, err := Open(path)
	if err != nil || len(recs) != 0 {
		t.Fatalf("Open of a missing log = %v, %v; want empty", recs, err)
	}
	for k := uint64(1); k <= 5; k++ {
		if err := l.Append(k, fmt.Appendf(nil, `{"n":%d}`, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(5, []byte("{}")); err == nil {
		t.Error("Append of a key not above the last succeeded")
	}
	if err := l.Append(6, []byte("a\nb")); err == nil {
		t.Error("Append of a payload with a newline succeeded")
	}
	got, valid, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`1={"n":1}`, `2={"n":2}`, `3={"n":3}`, `4={"n":4}`, `5={"n":5}`}
	if diff := cmp.Diff(want, keys(got)); diff != "" {
		t.Fatalf("Read (-want +got):\n%s", diff)
	}
	if fi, _ := os.Stat(path); fi.Size() != valid || valid != l.Size() {
		t.Errorf("valid = %d, Size = %d, file = %d bytes; want all equal", valid, l.Size(), fi.Size())
	}
	if err := l.Trim(3); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(6, []byte(`{"n":6}`)); err != nil {
		t.Fatal(err)
	}
	got, _, _ = Read(path)
	if diff := cmp.Diff([]string{`4={"n":4}`, `5={"n":5}`, `6={"n":6}`}, keys(got)); diff != "" {
		t.Fatalf("after Trim(3) and Append(6) (-want +got):\n%s", diff)
	}
	// Reopened, it goes on where it was.
	l.Close()
	l2, recs, err := Open(path)
	if err != nil || len(recs) != 3 {
		t.Fatalf("Open = %d records, %v", len(recs), err)
	}
	if err := l2.Trim(5); err != nil {
		t.Fatal(err)
	}
	if err := l2.Append(7, []byte(`{"n":7}`)); err != nil {
		t.Fatal(err)
	}
	got, _, _ = Read(path)
	if diff := cmp.Diff([]string{`6={"n":6}`, `7={"n":7}`}, keys(got)); diff != "" {
		t.Fatalf("after reopening, Trim(5), Append(7) (-want +got):\n%s", diff)
	}
	if err := l2.Reset(); err != nil {
		t.Fatal(err)
	}
	if err := l2.Append(1, []byte(`{}`)); err != nil {
		t.Fatalf("after Reset, keys start again: %v", err)
	}
	got, _, _ = Read(path)
	if diff := cmp.Diff([]string{`1={}`}, keys(got)); diff != "" {
		t.Fatalf("after Reset (-want +got):\n%s", diff)
	}
}

// TestTornRecord: whatever a crash leaves at the end of the log (a line
// without its newline, a bad checksum, garbage), readers drop it and what
// follows, and the next Append cuts it off first.
func TestTornRecord(t *testing.T) {
	for _, tail := range []string{
		`3 00000000 {"n":3`,                    // no newline
		"3 00000000 {\"n\":3}\n",               // wrong checksum
		"garbage\n",                            // not a record
		"2 " + sum(`{"n":2}`) + " {\"n\":2}\n", // a key that does not grow
	} {
		t.Run(strings.TrimSpace(tail), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.log")
			l, _, _ := Open(path)
			l.Append(1, []byte(`{"n":1}`))
			l.Append(2, []byte(`{"n":2}`))
			l.Close()
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString(tail)
			f.WriteString("4 " + sum(`{"n":4}`) + " {\"n\":4}\n") // after the fault: not trusted
			f.Close()
			l, recs, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{`1={"n":1}`, `2={"n":2}`}, keys(recs)); diff != "" {
				t.Fatalf("records (-want +got):\n%s", diff)
			}
			if err := l.Append(3, []byte(`{"n":3}`)); err != nil {
				t.Fatal(err)
			}
			got, _, _ := Read(path)
			if diff := cmp.Diff([]string{`1={"n":1}`, `2={"n":2}`, `3={"n":3}`}, keys(got)); diff != "" {
				t.Fatalf("after the next Append (-want +got):\n%s", diff)
			}
		})
	}
}

func sum(payload string) string {
	line := appendLine(nil, 0, []byte(payload))
	return strings.Fields(string(line))[1]
}

// TestAppendFull: on a full file system Append fails naming the log and
// ENOSPC, and leaves the log as it was; Reset still works (it needs no
// space).
func TestAppendFull(t *testing.T) {
	dir := fullfs.Mount(t, 256<<10)
	path := filepath.Join(dir, "x.log")
	l, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(1, []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	fullfs.Fill(t, dir, 0)
	big := []byte(`"` + strings.Repeat("x", 64<<10) + `"`)
	err = l.Append(2, big)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Append on a full file system = %v, want ENOSPC naming %s", err, path)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("the failed Append left %d bytes, want the %d before", len(after), len(before))
	}
	if err := l.Reset(); err != nil {
		t.Errorf("Reset on a full file system: %v", err)
	}
}

// FuzzRead: any bytes read as a log give records whose lines, written
// again, are exactly the valid prefix of the input.
func FuzzRead(f *testing.F) {
	f.Add(appendLine(appendLine(nil, 1, []byte(`{"a":1}`)), 2, []byte(`{}`)))
	f.Add([]byte("1 00000000 x\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, valid, _ := parse(data)
		var again []byte
		for i, r := range recs {
			if i > 0 && r.Key <= recs[i-1].Key {
				t.Fatalf("keys do not grow: %d after %d", r.Key, recs[i-1].Key)
			}
			again = appendLine(again, r.Key, r.Payload)
		}
		if string(again) != string(data[:valid]) {
			t.Fatalf("records written again = %q, want the valid prefix %q", again, data[:valid])
		}
	})
}

// TestStore: a base never replaces a newer one; after a failed append the
// store asks for the base (ErrWhole) until one is written, and that base
// empties the log whatever its records were.
func TestStore(t *testing.T) {
	dir := t.TempDir()
	base, logPath := filepath.Join(dir, "doc.json"), filepath.Join(dir, "doc.json.log")
	s, err := OpenStore(base, logPath, 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBase(5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	for gen := uint64(6); gen <= 8; gen++ {
		if err := s.Append(gen, fmt.Appendf(nil, "%d", gen)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.WriteBase(4, []byte("four")); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteBase(7, []byte("seven")); err != nil {
		t.Fatal(err)
	}
	data, recs, err := ReadStore(base, logPath)
	if err != nil || string(data) != "seven" {
		t.Fatalf("base = %q, %v; want seven (four is older than five)", data, err)
	}
	if diff := cmp.Diff([]string{"8=8"}, keys(recs)); diff != "" {
		t.Errorf("log after the base of 7 (-want +got):\n%s", diff)
	}
	if err := s.Append(8, []byte("again")); err == nil {
		t.Fatal("Append of a key already logged succeeded")
	}
	if err := s.Append(9, []byte("9")); !errors.Is(err, ErrWhole) {
		t.Fatalf("Append after a failed one = %v, want ErrWhole", err)
	}
	if err := s.WriteBase(9, []byte("nine")); err != nil {
		t.Fatal(err)
	}
	if err := s.Append(10, []byte("10")); err != nil {
		t.Fatalf("Append after the base: %v", err)
	}
	data, recs, _ = ReadStore(base, logPath)
	if string(data) != "nine" || !cmp.Equal([]string{"10=10"}, keys(recs)) {
		t.Errorf("store = %q %q, want nine and 10", data, keys(recs))
	}
}

// TestFirstAppendFull: an append that fails on a full file system leaves
// no log file behind when there was none.
func TestFirstAppendFull(t *testing.T) {
	dir := fullfs.Mount(t, 256<<10)
	fullfs.Fill(t, dir, 0)
	path := filepath.Join(dir, "x.log")
	l, _, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(1, []byte(`"`+strings.Repeat("x", 64<<10)+`"`)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full file system = %v, want ENOSPC", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed first append left %s behind (%v)", path, err)
	}
}
