package migrations

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// Phase is where one container is in the migration.
type Phase string

const (
	// PhaseDone: the container runs in the mode the flag asks for.
	PhaseDone Phase = "done"
	// PhasePending: the container is still to be replaced, or its
	// networks are still to be probed (or the migration is paused).
	PhasePending Phase = "pending"
	// PhaseFailed: a probe of one of its networks failed, so it keeps
	// (or got back) its copy, or the reconciler failed to replace it.
	PhaseFailed Phase = "failed"
)

// ContainerStatus is one container's place in the migration.
type ContainerStatus struct {
	Name     string   `json:"name"`
	Networks []string `json:"networks"`
	// Want is the mode the machine's flag asks for; Target the mode the
	// gate gives it now; Current the mode it runs in ("" when it does not
	// exist).
	Want    spec.NameMode `json:"want"`
	Target  spec.NameMode `json:"target"`
	Current spec.NameMode `json:"current"`
	Phase   Phase         `json:"phase"`
	Reason  string        `json:"reason,omitempty"`
}

// Status returns the migration status of every container, sorted by name.
// observed is what the runtime reports (one List); failures are the errors
// of the reconciler's last pass by container name (reconcile.Outcome.Err),
// nil when none.
func (g *Gate) Status(containers []spec.Container, observed []reconcile.Observed, failures map[string]error) []ContainerStatus {
	cur := currentModes(observed, g.cfg.Owner)
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.view()
	auto := autoStatus(s, g.cfg.Now(), g.settings(s))
	want := spec.Resolve
	if s.Flag == spec.FlagOff || s.Flag == "" {
		want = spec.Copy
	}
	var out []ContainerStatus
	for _, c := range containers {
		nets := networkNames(c)
		if len(nets) == 0 {
			nets = []string{spec.DefaultNetwork}
		}
		slices.Sort(nets)
		current := cur[c.Name]
		target := decide(s, nets, current)
		st := ContainerStatus{Name: c.Name, Networks: nets, Want: want, Target: target.Names}
		if current != nil {
			st.Current = current.Mode
		}
		converged := current != nil && current.Mode == target.Names &&
			(target.Names == spec.Copy || sameDNS(current.DNS, target.DNS))
		switch {
		case failures[c.Name] != nil:
			st.Phase, st.Reason = PhaseFailed, failures[c.Name].Error()
		case target.Names != want:
			st.Phase, st.Reason = blocked(s, auto, nets, want)
		case !converged && s.Paused:
			st.Phase, st.Reason = PhasePending, "paused (meshhost migrate resume)"
		case !converged && current == nil:
			st.Phase, st.Reason = PhasePending, "not created yet"
		case !converged:
			st.Phase, st.Reason = PhasePending, fmt.Sprintf("to be replaced: %s -> %s", current.Mode, target.Names)
		default:
			st.Phase = PhaseDone
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// blocked says why a container does not get the mode the flag wants;
// auto is what flag auto waits for.
func blocked(s *State, auto AutoStatus, nets []string, want spec.NameMode) (Phase, string) {
	if s.Paused {
		return PhasePending, "paused (meshhost migrate resume)"
	}
	var failed, unproven, waiting []string
	for _, n := range nets {
		ns := s.Networks[n]
		switch {
		case ns == nil || ns.Last == nil:
			unproven = append(unproven, n)
		case !ns.Last.Pass:
			failed = append(failed, fmt.Sprintf("%s: %s", n, ns.Last.Reason))
		case want == spec.Resolve && !ns.Resolve:
			waiting = append(waiting, n)
		}
	}
	switch {
	case len(failed) > 0:
		return PhaseFailed, "probe failed on " + strings.Join(failed, "; ")
	case len(unproven) > 0:
		return PhasePending, "network not probed yet: " + strings.Join(unproven, ", ")
	case s.Flag == spec.FlagAuto && s.AutoSwitchedAt.IsZero():
		return PhasePending, autoWaiting(auto)
	case len(waiting) > 0:
		return PhasePending, "network not switched yet: " + strings.Join(waiting, ", ")
	}
	return PhasePending, "resolve mode on networks without connectivity changes nothing"
}

// autoWaiting says what flag auto waits for before the machine switches.
func autoWaiting(a AutoStatus) string {
	var b strings.Builder
	switch {
	case a.Used == 0:
		b.WriteString("auto: waiting for the runtime to report a network the declared containers use")
	case len(a.Holding) == 0:
		b.WriteString("auto: waiting for the networks the declared containers use to pass their probe")
	case !a.UsedKnown:
		// No declaration recorded yet: every network holds the machine.
		fmt.Fprintf(&b, "auto: waiting for every network of the machine to pass its probe: %s", strings.Join(a.Holding, ", "))
	default:
		fmt.Fprintf(&b, "auto: waiting for networks the declared containers use to pass their probe: %s", strings.Join(a.Holding, ", "))
	}
	if len(a.Unused) > 0 {
		them := "them"
		if len(a.Unused) == 1 {
			them = "it"
		}
		fmt.Fprintf(&b, " (not for %s: no declared container uses %s)", strings.Join(a.Unused, ", "), them)
	}
	return b.String()
}

// ObservedContainers returns the containers of the gate's owner
// (GateConfig.Owner) the runtime reports, as their record labels say they
// were declared, for Status without a declaration at hand (`meshhost
// migrate status`). Containers set aside by an interrupted replacement are
// left out.
func (g *Gate) ObservedContainers(observed []reconcile.Observed) []spec.Container {
	var out []spec.Container
	for name, r := range currentModes(observed, g.cfg.Owner) {
		if strings.HasSuffix(name, reconcile.AsideSuffix) {
			continue
		}
		c := r.Container
		c.Name = name
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b spec.Container) int { return strings.Compare(a.Name, b.Name) })
	return out
}
