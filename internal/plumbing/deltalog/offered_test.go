package deltalog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestBaseAfterAFailedWriteFollowsTheOwner: after a write fails (an
// append, or the base itself), the owner's document has moved on without
// the files; a base older than that document (a compaction that took its
// snapshot before) must not make the log follow on again, or the owner's
// next record, acknowledged, would follow on from a document the files do
// not hold, and a restart would serve an older generation. Found by the
// resolver's TestStateFaultMatrix.
func TestBaseAfterAFailedWriteFollowsTheOwner(t *testing.T) {
	for _, failing := range []Step{StepAppendWrite, StepBaseWrite} {
		name := map[Step]string{StepAppendWrite: "append", StepBaseWrite: "base"}[failing]
		t.Run("failed "+name, func(t *testing.T) {
			dir := t.TempDir()
			base, logp := filepath.Join(dir, "doc"), filepath.Join(dir, "doc.log")
			if err := os.WriteFile(base, []byte("gen1"), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := OpenStore(base, logp, 1, 4, false)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			fail := false
			s.SetFaults(func(st Step, after bool) error {
				if fail && st == failing && !after {
					fail = false
					return errors.New("injected fault")
				}
				return nil
			})
			for gen := uint64(2); gen <= 5; gen++ {
				if err := s.Append(gen, fmt.Appendf(nil, "from%d", gen-1)); err != nil {
					t.Fatal(err)
				}
			}
			// Generation 6 fails to save: as a record, or as a base.
			fail = true
			if failing == StepAppendWrite {
				if err := s.Append(6, []byte("from5")); err == nil {
					t.Fatal("the injected fault did not fail the append")
				}
			} else if err := s.WriteBase(6, []byte("gen6")); err == nil {
				t.Fatal("the injected fault did not fail the base")
			}
			// A compaction of generation 5, snapshotted before 6.
			if err := s.WriteBase(5, []byte("gen5")); err != nil {
				t.Fatal(err)
			}
			// The owner's next change, from 6.
			err = s.Append(7, []byte("from6"))
			if errors.Is(err, ErrWhole) {
				err = s.WriteBase(7, []byte("gen7"))
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := served(t, base, logp); got < 7 {
				t.Errorf("generation 7 acknowledged, a restart serves %d", got)
			}
		})
	}
}
