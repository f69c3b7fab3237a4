package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/pass"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
)

// The operator's controls, kept in the state directory so that the
// commands that set them work whether or not the agent runs, and the agent
// reads them at every pass (and the reconciler before every action, for
// the freeze).

// DefaultHoldAbove is the agent's --hold-above: a declaration whose plan
// would replace and remove more containers than this (together) is held
// until an operator approves it.
const DefaultHoldAbove = 5

// ApprovedDeclaration returns the declaration generation the operator let
// past the blast-radius hold (ApproveDeclaration), 0 when none.
func ApprovedDeclaration(dir statedir.Dir) uint64 {
	data, err := os.ReadFile(dir.Approved())
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return n
}

// ApproveDeclaration lets declaration generation gen past the blast-radius
// hold: it goes ahead, paced by the replacement budget. A newer declaration
// is judged afresh.
func ApproveDeclaration(dir statedir.Dir, gen uint64) error {
	return writeAtomic(dir.Approved(), []byte(strconv.FormatUint(gen, 10)+"\n"))
}

// Freeze records a freeze: while the machine is frozen, no container is
// created, replaced, removed or updated. The resolver keeps serving every
// roster the machine receives.
type Freeze struct {
	Since  time.Time `json:"since"`
	Reason string    `json:"reason,omitempty"`
}

// Frozen returns the freeze in force, nil when the machine is not frozen.
// A freeze file that cannot be read is a freeze all the same (with the
// error): when in doubt, nothing changes.
func Frozen(dir statedir.Dir) (*Freeze, error) {
	data, err := os.ReadFile(dir.Frozen())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return &Freeze{}, fmt.Errorf("reading the freeze: %w", err)
	}
	var f Freeze
	if err := json.Unmarshal(data, &f); err != nil {
		return &Freeze{}, fmt.Errorf("the freeze %s is unreadable (the machine stays frozen; meshhost unfreeze removes it): %w", dir.Frozen(), err)
	}
	return &f, nil
}

// SetFrozen freezes the machine (f not nil) or unfreezes it (nil).
func SetFrozen(dir statedir.Dir, f *Freeze) error {
	if f == nil {
		if err := os.Remove(dir.Frozen()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("unfreezing: %w", err)
		}
		return nil
	}
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return writeAtomic(dir.Frozen(), append(data, '\n'))
}

// Status is what the operator's controls made of the agent's last pass, as
// `meshhost status`, `meshhost approve` and `meshhost plan` read it
// (status.json). The agent writes it when it changes: when a hold, the
// freeze or --hold-above changes, not at every roster or declaration
// change (the generations are in the saved declaration and the resolver's
// roster, where the readers find them).
//
// History:
//
//	1: first version. Later, held.removals (a hold counts removals too):
//	   added without a new version, as a reader that does not know it
//	   ignores it.
//	2: no generation and roster_generation: they changed at every roster
//	   change, and rewriting the file then was a third of a one-name
//	   change's CPU. The hold names its own generation. Version 1 files
//	   are read (their generations ignored).
type Status struct {
	Version int `json:"version"`
	// HoldAbove is the agent's --hold-above (0: no hold).
	HoldAbove int `json:"hold_above"`
	// Held is the blast-radius hold of the declaration in force, when its
	// plan replaces and removes more than HoldAbove containers (Approved
	// once the operator approved it). Held.Generation is the declaration
	// it holds.
	Held   *pass.Hold `json:"held,omitempty"`
	Frozen bool       `json:"frozen,omitempty"`
}

// statusVersion is Status.Version.
const statusVersion = 2

// LoadStatus returns what the agent's last pass found, nil when it wrote
// nothing yet.
func LoadStatus(dir statedir.Dir) (*Status, error) {
	data, err := os.ReadFile(dir.Status())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil || st.Version < 1 || st.Version > statusVersion {
		return nil, fmt.Errorf("the agent's status %s is unreadable (version %d; this meshhost reads 1 to %d): %v", dir.Status(), st.Version, statusVersion, err)
	}
	return &st, nil
}

// writeStatusLocked writes st when it differs from what the file holds
// (read once, so that a restart writes nothing it already has: on a full
// disk that write would fail). A failure is logged when it changes: the
// status informs, it decides nothing.
func (a *Agent) writeStatusLocked(st Status) {
	syncs.AssertLocked(&a.mu)
	st.Version = statusVersion
	data, err := json.Marshal(st)
	if err != nil {
		return
	}
	data = append(data, '\n')
	if a.statusWritten == nil {
		a.statusWritten, _ = os.ReadFile(a.cfg.State.Status())
	}
	if bytes.Equal(data, a.statusWritten) {
		return
	}
	if err := writeAtomic(a.cfg.State.Status(), data); err != nil {
		if err.Error() != a.statusErr {
			a.log.Warn("saving the agent's status for meshhost status", "err", err)
		}
		a.statusErr = err.Error()
		return
	}
	a.statusWritten, a.statusErr = data, ""
}

// controlsLocked publishes what the operator's controls make of this pass:
// the hold of declaration decl (nil: none) and the freeze (nil: none; ferr
// when its file is unreadable): the metrics, one log line when either
// changes, and status.json.
func (a *Agent) controlsLocked(decl *spec.Declaration, h *pass.Hold, freeze *Freeze, ferr error) {
	syncs.AssertLocked(&a.mu)
	frozen := freeze != nil
	switch {
	case frozen && !a.frozen:
		a.log.Warn("the machine is frozen: no container is created, replaced or removed until meshhost unfreeze; the resolver keeps serving roster changes",
			"since", freeze.Since, "reason", freeze.Reason, "err", ferr)
	case !frozen && a.frozen:
		a.log.Info("the machine is unfrozen: passes apply their plans again")
	}
	a.frozen = frozen
	a.metrics.frozen.Set(b2f(frozen))

	prev := a.hold
	switch {
	case h.Held() && (!prev.Held() || prev.Generation != h.Generation):
		// Waiting for an operator is the hold doing its job, not a fault:
		// a warning (the metric and MeshhostBlastRadiusHoldWaiting page).
		a.log.Warn(h.String(), "declaration_generation", h.Generation, "replacements", len(h.Replacements), "removals", len(h.Removals),
			"hold_above", h.HoldAbove, "containers", containerNames(h.Replacements), "removed", containerNames(h.Removals))
	case h != nil && h.Approved && (prev == nil || !prev.Approved || prev.Generation != h.Generation):
		a.log.Info("held declaration approved by the operator: it goes ahead, paced by the replacement budget", "declaration_generation", h.Generation,
			"replacements", len(h.Replacements), "removals", len(h.Removals))
	case h == nil && prev.Held():
		a.log.Info("the hold is lifted: the declaration in force replaces and removes at most --hold-above containers", "declaration_generation", decl.Generation, "held_declaration_generation", prev.Generation)
	}
	a.hold = h
	a.metrics.held.Set(b2f(h.Held()))
	var replacements, removals int
	if h.Held() {
		replacements, removals = len(h.Replacements), len(h.Removals)
	}
	a.metrics.heldReplacements.Set(float64(replacements))
	a.metrics.heldRemovals.Set(float64(removals))
	// What the alert on replacements pending reads, next to the budget's.
	a.cfg.Reconciler.ReportHeld(replacements + removals)
	a.writeStatusLocked(Status{HoldAbove: a.cfg.HoldAbove, Held: h, Frozen: frozen})
}

// containerNames lists the containers of rs, comma-separated.
func containerNames(rs []pass.Replacement) string {
	names := make([]string, 0, len(rs))
	for _, r := range rs {
		names = append(names, r.Container)
	}
	return strings.Join(names, ",")
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// networkNamer is a resolver that counts and logs refused clients by the
// runtime network holding them (*resolver.Server).
type networkNamer interface {
	SetNetworks([]resolver.Network)
}

// nameNetworks tells the resolver, when it can count refused clients by
// network, the runtime's networks nets.
func nameNetworks(r Resolver, nets []migrations.Network) {
	n, ok := r.(networkNamer)
	if !ok {
		return
	}
	out := make([]resolver.Network, 0, len(nets))
	for _, net := range nets {
		rn := resolver.Network{Name: net.Name}
		for _, sub := range net.Subnets {
			rn.Prefixes = append(rn.Prefixes, sub.Prefix)
		}
		out = append(out, rn)
	}
	n.SetNetworks(out)
}
