package agent

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/reconcile"
)

// ReconcileStateVersion is the version of the reconciler's state file
// this meshhost writes; it reads every version up to it.
//
// History:
//
//	1: the start times of the replacements in the budget's window, and
//	   the adoptions (ID, name, digest and record of each).
//	2: each adoption also carries its reconcile.AdoptionVersion. Those of
//	   a version 1 file have none: on podman before 5.1 (no durable
//	   in-place updates) the reconciler inspects those containers again,
//	   since a meshhost of then recorded limits an update set and a
//	   restart took away.
const ReconcileStateVersion = 2

// ReconcileState is what the reconciler keeps across restarts (in the
// state directory's Reconciler file), so a restart neither resets the
// replacement budget nor re-inspects adopted containers. The agent writes
// it; meshhost plan reads it, to plan with the agent's adoptions.
type ReconcileState struct {
	Version    int                  `json:"version"` // ReconcileStateVersion
	BudgetUsed []time.Time          `json:"budget_used"`
	Adoptions  []reconcile.Adoption `json:"adoptions"`
}

// LoadReconcileState returns the reconciler's saved state, and the file's
// bytes (nil when unreadable), so that an unchanged state is not written
// again.
func LoadReconcileState(path string, logger *slog.Logger) (ReconcileState, []byte) {
	var st ReconcileState
	data, err := os.ReadFile(path)
	if err != nil {
		return st, nil
	}
	if err := json.Unmarshal(data, &st); err != nil || st.Version < 1 || st.Version > ReconcileStateVersion {
		logger.Warn("ignoring unreadable reconciler state; the budget starts empty", "path", path, "version", st.Version, "err", err)
		return ReconcileState{}, nil
	}
	return st, data
}

// OpenReconciler returns the agent's reconciler for cfg, its budget and
// adoptions restored from the state file path, and save, which writes them
// there after each pass.
//
// The budget is also written the moment a pass charges it, before the
// replacements it charged touch podman (reconcile.Config.BudgetCharged):
// saved only after the pass, the charges of an agent killed mid-pass were
// lost, and an agent crash-looping through replacements began one per
// restart whatever the budget. When that write fails, the pass's
// replacements wait (and the pass fails, naming the file) rather than go
// ahead uncounted: see BudgetCharged for why.
//
// Both writes run within a pass, under the agent's lock.
func OpenReconciler(cfg reconcile.Config, path string, logger *slog.Logger) (rec *reconcile.Reconciler, save func(), err error) {
	st, onDisk := LoadReconcileState(path, logger)
	cfg.BudgetUsed, cfg.Adoptions = st.BudgetUsed, st.Adoptions
	cfg.BudgetCharged = func(used []time.Time) error {
		// rec is set: a pass runs only after New returned.
		var err error
		onDisk, err = writeReconcileState(path, ReconcileState{Version: ReconcileStateVersion, BudgetUsed: used, Adoptions: rec.Adoptions()}, onDisk)
		return err
	}
	if rec, err = reconcile.New(cfg); err != nil {
		return nil, nil, err
	}
	return rec, func() { onDisk = SaveReconcileState(path, rec, onDisk, logger) }, nil
}

// SaveReconcileState writes the reconciler's state when it differs from
// what was last written (prev), and returns what is on disk now: a pass that
// replaced nothing writes nothing. A failed write is logged.
func SaveReconcileState(path string, rec *reconcile.Reconciler, prev []byte, logger *slog.Logger) []byte {
	data, err := writeReconcileState(path, ReconcileState{Version: ReconcileStateVersion, BudgetUsed: rec.BudgetUsed(), Adoptions: rec.Adoptions()}, prev)
	if err != nil {
		logger.Error("saving reconciler state", "path", path, "err", err)
	}
	return data
}

// writeReconcileState writes st when it differs from what was last written
// (prev), and returns what is on disk now (prev when the write fails).
func writeReconcileState(path string, st ReconcileState, prev []byte) ([]byte, error) {
	data, _ := json.Marshal(st)
	if bytes.Equal(data, prev) {
		return prev, nil
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return prev, err // names path
	}
	return data, nil
}
