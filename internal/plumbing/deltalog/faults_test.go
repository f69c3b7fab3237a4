package deltalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// crash is the panic a fault injector raises to stop the "process" right
// at a write step.
type crash struct{}

var errInjected = errors.New("injected fault")

// served is the generation a restart serves from the files: the base's,
// then each record above it that follows on (the owner's read).
func served(t *testing.T, base, logp string) uint64 {
	t.Helper()
	data, recs, err := ReadStore(base, logp)
	if errors.Is(err, os.ErrNotExist) && data == nil {
		return 0
	}
	var ce *CorruptError
	if err != nil && !errors.As(err, &ce) {
		t.Fatalf("reading the store back: %v", err)
	}
	gen, err := strconv.ParseUint(strings.TrimPrefix(string(data), "gen"), 10, 64)
	if err != nil {
		t.Fatalf("base %q: %v", data, err)
	}
	for _, r := range recs {
		if r.Key <= gen {
			continue
		}
		if string(r.Payload) != fmt.Sprintf("from%d", gen) {
			break // does not follow on: the owner stops here
		}
		gen = r.Key
	}
	return gen
}

// TestFaultMatrix: a fault at every write step of a Store (an error; a
// crash right there; a crash right after the step took effect), then a
// restart: it serves the newest generation whose write returned success,
// never one older. The workload includes a compaction of an older
// document arriving late after a failed append (issue 22, defect 9).
func TestFaultMatrix(t *testing.T) {
	type mode int
	const (
		errBefore mode = iota
		errAfter
		crashBefore
		crashAfter
	)
	for step := Step(0); step < NumSteps; step++ {
		for _, m := range []mode{errBefore, errAfter, crashBefore, crashAfter} {
			for nth := 1; nth <= 8; nth++ { // every occurrence of the step in the workload
				t.Run(fmt.Sprintf("step%d/mode%d/hit%d", step, m, nth), func(t *testing.T) {
					dir := t.TempDir()
					base, logp := filepath.Join(dir, "doc"), filepath.Join(dir, "doc.log")
					if err := os.WriteFile(base, []byte("gen0"), 0o600); err != nil {
						t.Fatal(err)
					}
					s, err := OpenStore(base, logp, 0, 4, false)
					if err != nil {
						t.Fatal(err)
					}
					hits := 0
					s.SetFaults(func(st Step, after bool) error {
						if st != step || after != (m == errAfter || m == crashAfter) {
							return nil
						}
						if hits++; hits != nth {
							return nil
						}
						if m == crashBefore || m == crashAfter {
							panic(crash{})
						}
						return errInjected
					})
					var acked uint64
					doc := uint64(0) // the document's generation in memory
					// check: a restart now (a crash after any operation) serves
					// no generation older than one acknowledged.
					check := func(op string) {
						if got := served(t, base, logp); got < acked {
							t.Errorf("after %s, a restart serves generation %d, older than %d, whose write returned success", op, got, acked)
						}
					}
					write := func(gen uint64) {
						defer check(fmt.Sprintf("a base of generation %d", gen))
						// A base acknowledges nothing newer than the changes
						// already acknowledged (it is a copy of them).
						s.WriteBase(gen, fmt.Appendf(nil, "gen%d", gen))
					}
					change := func() {
						defer func() { check(fmt.Sprintf("the change to generation %d", doc)) }()
						prev := doc
						doc++
						err := s.Append(doc, fmt.Appendf(nil, "from%d", prev))
						if errors.Is(err, ErrWhole) {
							err = s.WriteBase(doc, fmt.Appendf(nil, "gen%d", doc))
						}
						if err == nil {
							acked = doc
						}
					}
					func() {
						defer func() {
							if r := recover(); r != nil {
								if _, ok := r.(crash); !ok {
									panic(r)
								}
							}
						}()
						for i := 0; i < 3; i++ {
							change()
						}
						old := doc
						write(doc) // compaction
						change()
						change()
						write(old) // a late compaction of an older document
						change()
						write(doc)
						change()
					}()
					// The process stops here (no Close: a crash closes nothing
					// cleanly either); a restart reads the files.
					if got := served(t, base, logp); got < acked {
						t.Errorf("a restart serves generation %d, older than %d, whose write returned success", got, acked)
					}
				})
			}
		}
	}
}
