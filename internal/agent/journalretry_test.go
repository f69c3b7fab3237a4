package agent

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/spec"
)

// TestJournalRecordRetried: a declaration applied by a pass whose journal
// write failed (a full disk: every journal write fails) is recorded by the next pass once the journal can take it,
// not left out of the history for good (and with it out of reach of
// meshhost rollback). The simulation found it (sim2-note.md).
func TestJournalRecordRetried(t *testing.T) {
	ctx := context.Background()
	jdir := t.TempDir()
	var full atomic.Bool
	j, err := journal.Open(jdir, journal.Options{Faults: func(journal.Step, bool) error {
		if full.Load() {
			return errors.New("no space left on device")
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, true, func(c *Config) { c.Journal = j })
	f.push(t, declaration(1, spec.FlagOn, 1, 3))
	if _, err := f.agent.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	f.push(t, declaration(2, spec.FlagOn, 2, 3))
	if _, err := f.agent.Pass(ctx); err != nil {
		t.Fatalf("a pass whose journal write fails: %v (it only warns)", err)
	}
	full.Store(false)
	if _, err := f.agent.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	entries, err := j.Declarations()
	if err != nil {
		t.Fatal(err)
	}
	var gens []uint64
	for _, e := range entries {
		gens = append(gens, e.Generation)
	}
	if len(gens) != 2 || gens[1] != 2 {
		t.Fatalf("journal holds declarations %v after the journal could be written again, want [1 2]", gens)
	}
}
