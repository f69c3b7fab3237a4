package journal_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/spec"
)

// crash is the panic a fault injector raises to stop the "process" right
// at a write step.
type crash struct{}

var errInjected = errors.New("injected fault")

// TestJournalFaultMatrix: a fault at every write step of the journal (an
// error; a crash right there; a crash right after the step took effect),
// at every occurrence of the step in a workload of passes and
// declarations that starts and prunes segments. After every write a
// restart (a journal opened afresh on the directory) reads every entry
// whose write returned success and that pruning may not have dropped,
// with the content written, and its newest declaration is never older
// than the newest acknowledged; after a crash the workload goes on in a
// restarted journal, and once the fault has passed every write succeeds.
func TestJournalFaultMatrix(t *testing.T) {
	type mode int
	const (
		errBefore mode = iota
		errAfter
		crashBefore
		crashAfter
	)
	const keep = 8 // segments of 2 entries
	for step := journal.Step(0); step < journal.NumSteps; step++ {
		for _, m := range []mode{errBefore, errAfter, crashBefore, crashAfter} {
			for nth := 1; nth <= 8; nth++ {
				t.Run(fmt.Sprintf("step%d/mode%d/hit%d", step, m, nth), func(t *testing.T) {
					dir := t.TempDir()
					hits, fired := 0, false
					opts := journal.Options{Keep: keep, Faults: func(st journal.Step, after bool) error {
						if fired || st != step || after != (m == errAfter || m == crashAfter) {
							return nil
						}
						if hits++; hits != nth {
							return nil
						}
						fired = true
						if m == crashBefore || m == crashAfter {
							panic(crash{})
						}
						return errInjected
					}}
					j, err := journal.Open(dir, opts)
					if err != nil {
						t.Fatal(err)
					}
					acked := map[uint64]uint64{} // pass seq -> the op that wrote it
					var ackedOrder []uint64
					var ackedDecl uint64
					// run does op, as a process would: a crash restarts the
					// journal; an error while no fault fired is a defect.
					run := func(name string, op func() error) {
						firedBefore := fired
						func() {
							defer func() {
								if r := recover(); r != nil {
									if _, ok := r.(crash); !ok {
										panic(r)
									}
									if j, err = journal.Open(dir, opts); err != nil {
										t.Fatalf("restarting after a crash in %s: %v", name, err)
									}
								}
							}()
							if err := op(); err != nil && (firedBefore || !fired) {
								t.Errorf("%s: %v, with no fault injected", name, err)
							}
						}()
						check(t, dir, name, acked, ackedOrder, ackedDecl)
					}
					for op := uint64(1); op <= 14; op++ {
						run(fmt.Sprintf("pass of op %d", op), func() error {
							p, err := j.RecordPass(journal.PassEntry{Generation: op})
							if err == nil {
								acked[p.Seq] = op
								ackedOrder = append(ackedOrder, p.Seq)
							}
							return err
						})
						if op%3 == 0 {
							gen := op
							run(fmt.Sprintf("declaration %d", gen), func() error {
								d := &spec.Declaration{Machine: "m", Generation: gen}
								_, err := j.RecordDeclaration(d, journal.Diff{}, time.Unix(int64(gen), 0))
								if err == nil {
									ackedDecl = gen
								}
								return err
							})
						}
					}
					if !fired {
						t.Skip("the workload makes fewer such steps")
					}
				})
			}
		}
	}
}

// check opens the journal in dir afresh, as a restart would, and checks
// it against what was acknowledged.
func check(t *testing.T, dir, after string, acked map[uint64]uint64, order []uint64, decl uint64) {
	t.Helper()
	r, err := journal.Open(dir, journal.Options{})
	if err != nil {
		t.Fatalf("after %s, a restart cannot open the journal: %v", after, err)
	}
	ps, err := r.Passes()
	if err != nil {
		t.Fatalf("after %s, a restart cannot read the passes: %v", after, err)
	}
	got := map[uint64]uint64{}
	for _, p := range ps {
		got[p.Seq] = p.Generation
	}
	// The newest acknowledged entries are kept (at least Keep, less the
	// unacknowledged ones a failed write may have left in between).
	for i, s := range order {
		if len(order)-i > 4 {
			continue // pruning may have dropped it
		}
		if g, ok := got[s]; !ok || g != acked[s] {
			t.Errorf("after %s, a restart reads pass %d as op %d (present %t), want op %d, whose write returned success", after, s, g, ok, acked[s])
		}
	}
	last, any, err := r.LastGeneration()
	if err != nil {
		t.Fatalf("after %s: %v", after, err)
	}
	if decl > 0 && (!any || last < decl) {
		t.Errorf("after %s, a restart's newest declaration is %d (any %t), older than %d, whose write returned success", after, last, any, decl)
	}
}
