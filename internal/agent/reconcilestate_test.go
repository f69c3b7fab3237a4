package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/testkit/fullfs"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/reconcile/memory"
	"github.com/meshhost/meshhost/spec"
)

// TestReconcileStateOnFullDisk: the reconciler's budget and adoptions file
// cannot be written on a full disk: the error is logged naming the file
// and ENOSPC, the previous file stays whole, and the next save tries
// again.
func TestReconcileStateOnFullDisk(t *testing.T) {
	dir := fullfs.Mount(t, 256<<10)
	path := statedir.New(dir).Reconciler()
	rec, err := reconcile.New(reconcile.Config{Runtime: memory.New(memory.Options{}), Owner: "full"})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	prev := SaveReconcileState(path, rec, nil, logger)
	if prev == nil {
		t.Fatalf("saving the reconciler state: %s", logs.String())
	}
	old, _ := os.ReadFile(path)
	release := fullfs.Fill(t, dir, 0)
	// A state that differs from the one on disk must be written.
	if got := SaveReconcileState(path, rec, []byte("other"), logger); string(got) != "other" {
		t.Errorf("a failed save returned %q, want the previous state kept", got)
	}
	if !strings.Contains(logs.String(), "saving reconciler state") || !strings.Contains(logs.String(), path) ||
		!strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("log %q: want the failed save naming %s and the full disk", logs.String(), path)
	}
	if now, _ := os.ReadFile(path); string(now) != string(old) {
		t.Errorf("the state file changed on a full disk: %q -> %q", old, now)
	}
	if st, data := LoadReconcileState(path, logger); data == nil || st.Version != ReconcileStateVersion {
		t.Errorf("the state file does not load after the failed save: %+v", st)
	}
	if tmps := fullfs.TempFiles(t, dir); len(tmps) != 0 {
		t.Errorf("temporary files left behind: %v", tmps)
	}
	release()
	if got := SaveReconcileState(path, rec, []byte("other"), logger); string(got) == "other" {
		t.Error("the save after space came back did not write")
	}
}

// TestReconcileStateOfAnOlderMeshhost: the reconciler's state file of a
// meshhost before version 2 (adoptions without their version) is read:
// its budget is restored, and on podman before 5.1 its adoptions are not
// trusted (that meshhost may have recorded limits a restart took away) and
// their containers are inspected again; with durable in-place updates they
// are. What is saved next is version 2.
func TestReconcileStateOfAnOlderMeshhost(t *testing.T) {
	used := time.Now().Add(-10 * time.Second).UTC().Truncate(time.Second)
	for _, tc := range []struct {
		name      string
		version   int // of the file
		adoption  int // the adoption's Version member; -1: none
		noInPlace bool
		kept      bool
	}{
		{"version 1, no in-place updates", 1, -1, true, false},
		{"version 1, in-place updates", 1, -1, false, true},
		{"version 2, no in-place updates", 2, reconcile.AdoptionVersion, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := memory.New(memory.Options{})
			id, err := rt.Create(context.Background(), spec.Rendered{Container: spec.Container{Name: "gitea", Image: "gitea:1"}})
			if err != nil {
				t.Fatal(err)
			}
			adoption := fmt.Sprintf(`{"ID": %q, "Name": "gitea", "Digest": "v2:x", "Record": "{}"`, id)
			want := reconcile.Adoption{ID: id, Name: "gitea", Digest: "v2:x", Record: "{}"}
			if tc.adoption >= 0 {
				adoption += fmt.Sprintf(`, "Version": %d`, tc.adoption)
				want.Version = tc.adoption
			}
			adoption += "}"
			path := filepath.Join(t.TempDir(), "reconciler.json")
			file := fmt.Sprintf(`{"version": %d, "budget_used": [%q], "adoptions": [%s]}`, tc.version, used.Format(time.RFC3339), adoption)
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			rec, save, err := OpenReconciler(reconcile.Config{Runtime: rt, NoInPlaceUpdates: tc.noInPlace}, path, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			var wantAdoptions []reconcile.Adoption
			if tc.kept {
				wantAdoptions = append(wantAdoptions, want)
			}
			if diff := cmp.Diff(wantAdoptions, rec.Adoptions(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("adoptions restored from %s (-want +got):\n%s", file, diff)
			}
			if got := rec.BudgetUsed(); len(got) != 1 || !got[0].Equal(used) {
				t.Errorf("budget restored = %v, want [%v]", got, used)
			}
			save()
			if st, _ := LoadReconcileState(path, slog.New(slog.DiscardHandler)); st.Version != ReconcileStateVersion || len(st.BudgetUsed) != 1 {
				t.Errorf("saved state = %+v, want version %d with the budget", st, ReconcileStateVersion)
			}
		})
	}
}
