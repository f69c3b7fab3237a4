package migrations

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// GateConfig is what a Gate needs. Path is required.
type GateConfig struct {
	// Path is the gate's state file (the agent's is its state directory's
	// migrations.json); its lock is Path+".lock", beside it.
	Path string
	// Owner is the owner of the reconciler whose containers the gate
	// judges (reconcile.Config.Owner; the agent's machine name): only
	// their record labels say which mode a container runs in.
	Owner      string
	Logger     *slog.Logger
	Registerer prometheusRegisterer
	// Now is the gate's clock. Nil: time.Now.
	Now func() time.Time
	// Interval is how often every network is probed again. Default 10m.
	Interval time.Duration
	// Retry is how soon a network whose last probe failed is probed again.
	// Default 30s.
	Retry time.Duration
	// RollbackAfter is how many probes in a row must fail before a network
	// in resolve mode goes back to copy mode; until then it is failing
	// (reported, and containers created on it get copy mode). Zero: the
	// state file's (Settings), else 2.
	RollbackAfter int
	// NodeLocal and Loopback are the addresses the Exposer exposes the
	// resolver on (ExposerConfig's); only proofs of them count. Zero: the
	// state file's (Settings), else the defaults.
	NodeLocal, Loopback netip.Addr
	// MaxProofAge is how old a network's passing probe may be and still
	// switch it to resolve mode; networks in resolve mode stay there.
	// Zero: the state file's (Settings), else DefaultMaxProofAge, or twice
	// Interval when that is longer. Set (with RollbackAfter), it is
	// recorded in the state file, so commands that open the file without
	// it judge as the agent does.
	MaxProofAge time.Duration
}

// DefaultMaxProofAge is GateConfig.MaxProofAge's default: six probe
// intervals at the default Interval.
const DefaultMaxProofAge = time.Hour

// Gate decides each container's name mode from the machine's flag and what
// the probes proved. It fails closed: a container is in resolve mode only
// when every one of its networks is, and a network is only after a probe on
// it passed. Its state lives in a file, which is the truth: another process
// (`meshhost migrate pause`) may change it, and the gate reads it again
// when it changed. Methods are safe for concurrent use.
type Gate struct {
	cfg     GateConfig
	log     *slog.Logger
	metrics *metrics

	// mu guards the fields below.
	mu    sync.Mutex
	state *State
	stamp fileStamp // of the state file when state was read or written
	// autoHeldBy lists the networks holding flag auto back, and those it
	// ignores as unused, as last logged.
	autoHeldBy string
	// records are the record labels Modes read last, by container ID, with
	// what Modes needs of them: a pass over 10,000 containers then parses
	// only the labels that changed.
	records map[string]modeRecord
}

// modeRecord is what Modes keeps of a container's record label: the name
// mode, DNS and networks it was created with.
type modeRecord struct {
	label string
	r     *spec.Rendered
}

// fileStamp tells whether the state file changed since the gate read or
// wrote it. The inode is in it because every write renames a new file
// over the old one: another process's write within the file system's
// time granularity, of the same size, still shows.
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

// OpenGate reads the gate's state from cfg.Path (a fresh state when there
// is none yet).
func OpenGate(cfg GateConfig) (*Gate, error) {
	if cfg.Path == "" {
		return nil, errors.New("migrations: GateConfig.Path is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Interval = cmp.Or(cfg.Interval, 10*time.Minute)
	cfg.Retry = cmp.Or(cfg.Retry, 30*time.Second)
	// Zero (unset) settings are the state file's; see settings.
	cfg.RollbackAfter = max(cfg.RollbackAfter, 0)
	cfg.MaxProofAge = max(cfg.MaxProofAge, 0)
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("registering migration metrics: %w", err)
	}
	g := &Gate{cfg: cfg, log: cfg.Logger.With("component", "migrations"), metrics: m}
	g.mu.Lock()
	if err := g.refreshLocked(true); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	record := g.recordSettings(g.state.clone())
	g.metrics.set(g.state)
	g.mu.Unlock()
	if record {
		// Recorded now, not at the first pass, which may wait long for the
		// runtime (podman at boot): an operator command meanwhile judges
		// with these settings. A gate that cannot write works all the same
		// (the next write records them); what it loses is logged.
		if err := g.update(func(*State) error { return nil }); err != nil {
			g.log.Warn("recording the gate's settings in its state file; operator commands judge with the ones it records until a write succeeds",
				"path", cfg.Path, "err", err)
		}
	}
	return g, nil
}

// settings returns the settings the gate judges s with: its config's
// where set, else those s records, else the defaults.
func (g *Gate) settings(s *State) Settings {
	return Settings{
		MaxProofAge:   cmp.Or(g.cfg.MaxProofAge, max(s.Settings.MaxProofAge, 0), max(DefaultMaxProofAge, 2*g.cfg.Interval)),
		RollbackAfter: cmp.Or(g.cfg.RollbackAfter, max(s.Settings.RollbackAfter, 0), 2),
		NodeLocal:     cmp.Or(g.cfg.NodeLocal.Unmap(), s.Settings.NodeLocal),
		Loopback:      cmp.Or(g.cfg.Loopback.Unmap(), s.Settings.Loopback),
	}
}

// recordSettings records in s the settings g's config sets, and reports
// whether that changed s.
func (g *Gate) recordSettings(s *State) (changed bool) {
	before := s.Settings
	if g.cfg.MaxProofAge > 0 {
		s.Settings.MaxProofAge = g.cfg.MaxProofAge
	}
	if g.cfg.RollbackAfter > 0 {
		s.Settings.RollbackAfter = g.cfg.RollbackAfter
	}
	if g.cfg.NodeLocal.IsValid() {
		s.Settings.NodeLocal = g.cfg.NodeLocal.Unmap()
	}
	if g.cfg.Loopback.IsValid() {
		s.Settings.Loopback = g.cfg.Loopback.Unmap()
	}
	return s.Settings != before
}

func (g *Gate) path() string { return g.cfg.Path }

func stampOf(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ino: inodeOf(fi)}
}

// refreshLocked reads the state file again if it changed since the gate
// last read or wrote it.
func (g *Gate) refreshLocked(force bool) error {
	syncs.AssertLocked(&g.mu)
	st := stampOf(g.path())
	if !force && g.state != nil && st == g.stamp {
		return nil
	}
	s, err := LoadState(g.cfg.Path)
	if err != nil {
		return err
	}
	g.state, g.stamp = s, st
	return nil
}

// view returns the current state (read again if another process changed
// it); the caller must not modify it and must hold g.mu.
func (g *Gate) view() *State {
	if err := g.refreshLocked(false); err != nil {
		g.log.Error("reading migration state; using the last one read", "err", err)
	}
	return g.state
}

// update applies fn to the state under the state file's lock, records
// the gate's settings, evaluates the switch and saves the result.
func (g *Gate) update(fn func(s *State) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	// change applies fn (and the settings, and the judgement) to s, and
	// reports whether that changed it.
	change := func(s *State) (bool, error) {
		before, _ := json.Marshal(s)
		g.recordSettings(s)
		if err := fn(s); err != nil {
			return false, err
		}
		g.evaluate(s)
		after, _ := json.Marshal(s)
		return !bytes.Equal(before, after), nil
	}
	// The file is as the gate last read or wrote it: its state is the
	// gate's. A change that changes nothing (the agent observes the same
	// networks at every pass) then reads, locks and writes nothing.
	var s *State
	if st := stampOf(g.path()); g.state != nil && st != (fileStamp{}) && st == g.stamp {
		s = g.state.clone()
		changed, err := change(s)
		if err != nil {
			return err
		}
		if !changed {
			g.state = s
			g.metrics.set(s)
			return nil
		}
	}
	unlock, err := lockFile(g.cfg.Path + ".lock")
	if err != nil {
		return err
	}
	defer unlock()
	changed := true
	// Under the lock: another process may have written the file since.
	// Then fn applies to what it wrote.
	if s == nil || stampOf(g.path()) != g.stamp {
		if s, err = LoadState(g.cfg.Path); err != nil {
			return err
		}
		if changed, err = change(s); err != nil {
			return err
		}
	}
	// Nothing changed: nothing to write, so a full disk fails no pass
	// that changes nothing.
	if changed || stampOf(g.path()) == (fileStamp{}) {
		if err := s.save(g.cfg.Path); err != nil {
			return err
		}
	}
	g.state, g.stamp = s, stampOf(g.path())
	g.metrics.set(s)
	return nil
}

// State returns a copy of the gate's state.
func (g *Gate) State() *State {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.view().clone()
}

// SetFlag records the machine's flag from its declaration. Turning it off
// is the rollback: every network goes back to copy mode at once (the
// reconciler then replaces each container once, within its budget). A
// pass records its declaration with Declare, which sets the flag too.
func (g *Gate) SetFlag(flag spec.MeshNamesFlag) error {
	if err := checkFlag(flag); err != nil {
		return err
	}
	g.mu.Lock()
	same := g.view().Flag == flag
	g.mu.Unlock()
	if same {
		return nil
	}
	return g.update(func(s *State) error {
		g.setFlag(s, flag)
		return nil
	})
}

// Declare records what the gate needs of the machine's declaration d: its
// flag (as SetFlag does) and the networks its containers use (UsedNetworks:
// a container that declares none is on the runtime's default network), in
// one change of the state file, so that the switch is never judged with
// one declaration's flag and another's networks.
//
// Under flag auto only the networks a declared container uses hold the
// machine back. One no declared container uses (a leftover network, an
// --internal network with aardvark-dns, where no strategy works) is still
// observed, probed and reported, but the machine switches without it.
// Failing closed does not depend on it: after the switch each network
// switches on its own passing probe, as under "on", so a container
// declared later onto a network without one gets copy mode until it passes.
//
// The agent calls it at every pass, before Observe; `meshhost plan` with
// the declaration it plans. Recorded in the state file (State.Used), the
// networks are what an operator command that opens the same file (`meshhost
// migrate pause`, `meshhost probe --state`) judges the switch with, as
// the agent does.
func (g *Gate) Declare(d *spec.Declaration) error {
	if d == nil {
		return errors.New("migrations: Declare: no declaration")
	}
	if err := checkFlag(d.MeshNames); err != nil {
		return err
	}
	used := UsedNetworks(d.Containers)
	g.mu.Lock()
	s := g.view()
	same := s.Flag == d.MeshNames && s.Used != nil && slices.Equal(s.Used, used)
	g.mu.Unlock()
	if same {
		return nil
	}
	return g.update(func(s *State) error {
		g.setFlag(s, d.MeshNames)
		if s.Used == nil || !slices.Equal(s.Used, used) {
			g.log.Debug("networks the declared containers use", "networks", used)
		}
		s.Used = used
		return nil
	})
}

// UsedNetworks returns the networks containers use, sorted and without
// duplicates: those each declares, and for a container that declares none
// the runtime's default network (spec.DefaultNetwork), which spec.Render
// attaches it to. It is never nil.
func UsedNetworks(containers []spec.Container) []string {
	// A set first: a pass over 10,000 containers on a few networks sorts
	// a few names.
	set := map[string]struct{}{}
	for _, c := range containers {
		if len(c.Networks) == 0 {
			set[spec.DefaultNetwork] = struct{}{}
		}
		for _, n := range c.Networks {
			set[n.Name] = struct{}{}
		}
	}
	return append([]string{}, slices.Sorted(maps.Keys(set))...)
}

func checkFlag(flag spec.MeshNamesFlag) error {
	switch flag {
	case spec.FlagOff, spec.FlagAuto, spec.FlagOn:
		return nil
	}
	return fmt.Errorf("migrations: %q is not a flag; want %q, %q or %q", flag, spec.FlagOff, spec.FlagAuto, spec.FlagOn)
}

// setFlag sets s's flag, and logs a change.
func (g *Gate) setFlag(s *State, flag spec.MeshNamesFlag) {
	if s.Flag != flag {
		g.log.Info("mesh names flag changed", "from", s.Flag, "to", flag)
	}
	s.Flag = flag
}

// Observe records the networks the runtime reports now. It returns whether
// the set changed; the new networks then need a probe (NeedsProbe).
func (g *Gate) Observe(nets []Network) (changed bool, err error) {
	err = g.update(func(s *State) error {
		now := map[string]Network{}
		for _, n := range nets {
			now[n.Name] = n
		}
		for name, ns := range s.Networks {
			if _, ok := now[name]; !ok && ns.Present {
				ns.Present, changed = false, true
			}
		}
		for _, n := range nets {
			ns := s.Networks[n.Name]
			if ns == nil {
				ns = &NetworkState{}
				s.Networks[n.Name] = ns
			}
			if !ns.Present || ns.Kind != KindOf(n) {
				changed = true
			}
			subnets := subnetsOf(n)
			switch {
			case ns.Kind != "" && ns.Kind != KindOf(n):
				// Recreated under the same name with other settings: what
				// was proven is void.
				g.log.Warn("network changed kind; probing it again", "network", n.Name, "from", ns.Kind, "to", KindOf(n))
				*ns = NetworkState{}
			case len(ns.Subnets) > 0 && !slices.Equal(ns.Subnets, subnets):
				// Same kind, other addresses: the proven DNS server may
				// not even be on it any more. (Podman refuses to remove a
				// network with containers, so none is on it yet.)
				g.log.Warn("network changed its subnets; probing it again", "network", n.Name, "from", ns.Subnets, "to", subnets)
				*ns = NetworkState{}
			}
			ns.Kind, ns.Present, ns.Subnets = KindOf(n), true, subnets
		}
		return nil
	})
	return changed, err
}

// NeedsProbe returns the present networks to probe now, sorted: never
// probed, last probed Interval ago, failing and last probed Retry ago, or
// last probed more than proofSkew in the future. A probe from the future
// was stamped by a clock that has since gone back: its age is unknown, so
// it is due now rather than when the clock catches up with it (a network
// in resolve mode would go unchecked that long, a day or a year, and one
// that lost its path to the resolver would never get its copy back).
func (g *Gate) NeedsProbe() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.view()
	now := g.cfg.Now()
	var out []string
	for name, ns := range s.Networks {
		switch {
		case !ns.Present:
		case ns.Last == nil,
			now.Sub(ns.Last.At) < -proofSkew,
			now.Sub(ns.Last.At) >= g.cfg.Interval,
			!ns.Last.Pass && now.Sub(ns.Last.At) >= g.cfg.Retry:
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Record records probe results and switches networks as the flag allows.
// A network in resolve mode whose probe fails is logged as an error and
// counted in meshhost_migrations_network_failing.
func (g *Gate) Record(results []Result) error {
	return g.update(func(s *State) error {
		for _, r := range results {
			ns := s.Networks[r.Network]
			if ns == nil {
				ns = &NetworkState{Kind: r.Kind, Present: true}
				s.Networks[r.Network] = ns
			}
			g.metrics.probe(r.Pass)
			last := r
			ns.Last = &last
			if !r.Pass {
				ns.Failures++
				if ns.Resolve {
					g.log.Error("network in resolve mode is failing its probe: containers created on it get copy mode",
						"network", r.Network, "strategy", r.Strategy, "reason", r.Reason, "failures", ns.Failures,
						"rollback_after", g.settings(s).RollbackAfter)
				}
				continue
			}
			p := &Proof{Strategy: r.Strategy, DNS: r.DNS, At: r.At}
			if why := s.Settings.proofMismatch(p); why != "" {
				// Fail closed: containers would get a nameserver nobody serves.
				g.log.Error("probe result refused: it proves another resolver address than the agent's", "network", r.Network, "reason", why)
				last.Pass, last.Reason = false, why
				ns.Failures++
				continue
			}
			ns.Failures = 0
			if ns.Proven != nil && ns.Resolve && !sameDNS(ns.Proven.DNS, p.DNS) {
				g.log.Warn("network's proven configuration changed; its resolve-mode containers will be replaced",
					"network", r.Network, "from", ns.Proven.Strategy, "to", p.Strategy)
			}
			if ns.Proven == nil || ns.Proven.Strategy != p.Strategy || !sameDNS(ns.Proven.DNS, p.DNS) {
				ns.Proven = p
			} else {
				ns.Proven.At = p.At
			}
		}
		return nil
	})
}

// proofSkew is how far in the future a probe's time may be (clocks of the
// prober and the gate disagree a little) and still count as fresh; beyond
// it, the clock went backwards and the probe's age is unknown.
const proofSkew = time.Minute

// passing reports whether ns's latest probe passed, recently enough at now
// to switch on it under set.
func passing(ns *NetworkState, now time.Time, set Settings) bool {
	if ns.Last == nil || !ns.Last.Pass || ns.Proven == nil || set.proofMismatch(ns.Proven) != "" {
		return false
	}
	age := now.Sub(ns.Last.At)
	return age <= set.MaxProofAge && age >= -proofSkew
}

// AutoStatus is what flag auto waits for before the machine switches,
// or, once it has, what it would wait for (Gate.Auto).
type AutoStatus struct {
	// SwitchedAt is when the machine switched under auto (State.AutoSwitchedAt);
	// zero before, and under another flag.
	SwitchedAt time.Time
	// Holding are the networks the runtime reports, a declared container
	// uses and whose probe has not passed (or passed too long ago to switch
	// on, see GateConfig.MaxProofAge), sorted: the machine keeps copied
	// names until each passes.
	Holding []string
	// Unused are the networks the runtime reports that no declared
	// container uses, sorted: probed and reported, they hold nothing back.
	Unused []string
	// Used counts the networks the runtime reports that a declared
	// container uses; the machine switches once there is one and none
	// holds it back.
	Used int
	// UsedKnown: the state records the networks the declared containers
	// use (Declare). A state that does not yet (written by a meshhost before
	// it, or before the agent's first pass) counts every network the
	// runtime reports as used, as such a meshhost did.
	UsedKnown bool
}

// autoStatus is Auto for s at now under set.
func autoStatus(s *State, now time.Time, set Settings) AutoStatus {
	a := AutoStatus{UsedKnown: s.Used != nil}
	if s.Flag == spec.FlagAuto {
		a.SwitchedAt = s.AutoSwitchedAt
	}
	for _, name := range slices.Sorted(maps.Keys(s.Networks)) {
		ns := s.Networks[name]
		switch {
		case !ns.Present:
		case a.UsedKnown && !slices.Contains(s.Used, name):
			a.Unused = append(a.Unused, name)
		default:
			a.Used++
			if !passing(ns, now, set) {
				a.Holding = append(a.Holding, name)
			}
		}
	}
	return a
}

// Auto says which networks flag auto waits for and which it ignores as
// unused, judged now as the gate's next change of its state would.
func (g *Gate) Auto() AutoStatus {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.view()
	return autoStatus(s, g.cfg.Now(), g.settings(s))
}

// evaluate switches networks as the flag and the probes allow.
func (g *Gate) evaluate(s *State) {
	now := g.cfg.Now()
	set := g.settings(s)
	if s.Flag == spec.FlagAuto && s.AutoSwitchedAt.IsZero() {
		a := autoStatus(s, now, set)
		if a.Used > 0 && len(a.Holding) == 0 {
			s.AutoSwitchedAt = now
			g.log.Info("every network a declared container uses passed its probe: switching the machine to resolve mode",
				"networks", a.Used, "ignored_unused", a.Unused)
		}
		// Say which networks hold the machine back, and which it does not
		// wait for, when that changes.
		if held := strings.Join(a.Holding, ",") + " " + strings.Join(a.Unused, ","); held != g.autoHeldBy {
			g.autoHeldBy = held
			if len(a.Holding) > 0 {
				g.log.Warn("mesh_names auto: the machine keeps copied names until the networks its declared containers use pass their probe",
					"holding", a.Holding, "ignored_unused", a.Unused)
			}
		}
	}
	if s.Flag != spec.FlagAuto {
		s.AutoSwitchedAt = time.Time{}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Networks)) {
		ns := s.Networks[name]
		want := ns.Resolve
		switch {
		case s.Flag == spec.FlagOff:
			want = false
		case ns.Resolve && ns.Failures >= set.RollbackAfter:
			want = false
			g.log.Error("network failed its probe repeatedly: returning its containers to copy mode",
				"network", name, "failures", ns.Failures)
		case s.Flag == spec.FlagOn, s.Flag == spec.FlagAuto && !s.AutoSwitchedAt.IsZero():
			want = want || passing(ns, now, set)
		}
		if want != ns.Resolve {
			ns.Resolve = want
			ns.ResolveSince = time.Time{}
			mode := spec.Copy
			if want {
				ns.ResolveSince = now
				mode = spec.Resolve
			}
			g.log.Info("network switched", "network", name, "mode", mode)
		}
	}
}

// Strategies returns the proven strategy of every network in resolve mode:
// the agent exposes the resolver through each on every pass
// (Exposer.Expose), whether or not it can probe, and prefers them when
// probing again (Runner.Probe), so a network keeps its configuration.
func (g *Gate) Strategies() map[string]Strategy {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]Strategy{}
	for name, ns := range g.view().Networks {
		if ns.Proven != nil && (ns.Resolve || ns.Last != nil && ns.Last.Pass) {
			out[name] = ns.Proven.Strategy
		}
	}
	return out
}

// Pause stops the migration where it is: containers that exist keep their
// current mode, in either direction, except that a container whose network
// went back to copy mode after failing its probes still gets its copy back,
// and one whose resolve mode its networks no longer prove (it moved to
// other networks, or a network lost its proof) gets what a new container
// gets. Containers created while paused get the gate's mode.
func (g *Gate) Pause() error {
	return g.update(func(s *State) error {
		if !s.Paused {
			s.Paused, s.PausedAt = true, g.cfg.Now()
			g.log.Info("migration paused")
		}
		return nil
	})
}

// Resume undoes Pause.
func (g *Gate) Resume() error {
	return g.update(func(s *State) error {
		if s.Paused {
			s.Paused, s.PausedAt = false, time.Time{}
			g.log.Info("migration resumed")
		}
		return nil
	})
}

// netMode is a network's mode as containers see it.
type netMode int

const (
	netCopy    netMode = iota
	netResolve         // proven and in resolve mode
	netFailing         // in resolve mode, but its latest probe failed
)

func modeOf(s *State, name string) (netMode, *NetworkState) {
	ns := s.Networks[name]
	switch {
	case ns == nil || !ns.Resolve || !s.proofUsable(ns):
		return netCopy, ns
	case ns.Last != nil && !ns.Last.Pass:
		return netFailing, ns
	}
	return netResolve, ns
}

// Mode returns the name mode of a container on networks (none: the
// runtime's default network). current is the container as it runs now
// (from its record label), nil when it does not exist yet.
func (g *Gate) Mode(networks []string, current *spec.Rendered) spec.Mode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return decide(g.view(), networks, current)
}

// Modes returns the name mode of every container, by name. observed is what
// the runtime reports (one List), to read the mode each container runs in.
func (g *Gate) Modes(containers []spec.Container, observed []reconcile.Observed) map[string]spec.Mode {
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.currentModesLocked(observed)
	s := g.view()
	out := make(map[string]spec.Mode, len(containers))
	for _, c := range containers {
		current := cur[c.Name]
		if current == nil && s.Paused {
			// A replacement a crash interrupted left the old container
			// aside: paused, the name keeps the mode it ran in, as any
			// container that exists does, instead of a new one's.
			current = cur[c.Name+spec.AsideSuffix]
		}
		out[c.Name] = decide(s, networkNames(c), current)
	}
	return out
}

func networkNames(c spec.Container) []string {
	var out []string
	for _, n := range c.Networks {
		out = append(out, n.Name)
	}
	return out
}

// currentModesLocked is currentModes, parsing only the record labels
// that changed since the last call.
func (g *Gate) currentModesLocked(observed []reconcile.Observed) map[string]*spec.Rendered {
	syncs.AssertLocked(&g.mu)
	out := make(map[string]*spec.Rendered, len(observed))
	next := make(map[string]modeRecord, len(observed))
	for _, o := range observed {
		if !reconcile.ManagedBy(o, g.cfg.Owner) {
			continue
		}
		label := o.Labels[digest.LabelRecord]
		if m, ok := g.records[o.ID]; ok && m.label == label {
			next[o.ID], out[o.Name] = m, m.r
			continue
		}
		r, err := digest.ParseRecord(label)
		if err != nil {
			continue
		}
		// Only what decide reads: a copy-mode record's hosts can be the
		// whole roster.
		kept := &spec.Rendered{Mode: r.Mode, DNS: r.DNS}
		kept.Networks = r.Networks
		next[o.ID], out[o.Name] = modeRecord{label, kept}, kept
	}
	g.records = next
	return out
}

// currentModes reads the settings each container owner manages was created
// with from its record label.
func currentModes(observed []reconcile.Observed, owner string) map[string]*spec.Rendered {
	out := map[string]*spec.Rendered{}
	for _, o := range observed {
		if !reconcile.ManagedBy(o, owner) {
			continue
		}
		r, err := digest.ParseRecord(o.Labels[digest.LabelRecord])
		if err != nil {
			continue
		}
		out[o.Name] = &r
	}
	return out
}

// decide gives a container on networks its mode. current is the container
// as it runs now (nil: not created yet). Resolve mode is given only with
// DNS servers that probes proved on the container's networks, and only
// when every one of them has a proof:
//   - a network in copy mode, or without a proof, gives copy mode;
//   - a network whose latest probe failed (still in resolve mode, see
//     GateConfig.RollbackAfter) keeps resolve mode for a container that
//     runs on it in resolve mode already, and gives copy mode to one that
//     would join it;
//   - paused, a container keeps the mode it runs in, either way, as long as
//     it stays on the networks it runs on and they still prove the servers
//     it uses; one that moves to other networks is created anew, and gets
//     what a new container gets.
func decide(s *State, networks []string, current *spec.Rendered) spec.Mode {
	if len(networks) == 0 {
		networks = []string{spec.DefaultNetwork}
	}
	networks = slices.Sorted(slices.Values(networks))
	copyMode := spec.Mode{Names: spec.Copy}
	var dns spec.DNSConfig
	anyCopy, anyUnproven, rolledBack := false, false, false
	joinsFailing, joins := false, false
	for _, n := range networks {
		m, ns := modeOf(s, n)
		runs := runsResolvedOn(current, n)
		switch m {
		case netCopy:
			anyCopy = true
			rolledBack = rolledBack || ns != nil && ns.Last != nil && !ns.Last.Pass
		case netFailing:
			joinsFailing = joinsFailing || !runs
		}
		joins = joins || !runs
		if !s.proofUsable(ns) {
			anyUnproven = true
			continue
		}
		dns = mergeDNS(dns, ns.Proven.DNS)
	}
	if s.Paused && current != nil {
		switch {
		case current.Mode != spec.Resolve:
			return copyMode
		case !rolledBack && !anyUnproven && !joins && containsAll(dns.Servers, current.DNS.Servers):
			return spec.Mode{Names: spec.Resolve, DNS: current.DNS}
		}
		// Rolled back before the pause (safety first), or moved, or what
		// it uses is no longer proven there: what a new container gets.
	}
	switch {
	case anyCopy, anyUnproven, joinsFailing:
		return copyMode
	case len(dns.Servers) == 0:
		// Networks without connectivity only (StrategyNone): nothing can be
		// resolved either way; the copy at least changes nothing.
		return copyMode
	}
	return spec.Mode{Names: spec.Resolve, DNS: dns}
}

// runsResolvedOn reports whether the container current runs in resolve mode
// on network n.
func runsResolvedOn(current *spec.Rendered, n string) bool {
	if current == nil || current.Mode != spec.Resolve {
		return false
	}
	if len(current.Networks) == 0 {
		return n == spec.DefaultNetwork
	}
	return slices.ContainsFunc(current.Networks, func(a spec.NetworkAttachment) bool { return a.Name == n })
}

func containsAll(set, xs []netip.Addr) bool {
	if len(xs) == 0 {
		return false
	}
	for _, x := range xs {
		if !slices.Contains(set, x) {
			return false
		}
	}
	return true
}

// mergeDNS appends b's servers, search domains and options not yet in a.
func mergeDNS(a, b spec.DNSConfig) spec.DNSConfig {
	for _, x := range b.Servers {
		if !slices.Contains(a.Servers, x) {
			a.Servers = append(a.Servers, x)
		}
	}
	for _, x := range b.Search {
		if !slices.Contains(a.Search, x) {
			a.Search = append(a.Search, x)
		}
	}
	for _, x := range b.Options {
		if !slices.Contains(a.Options, x) {
			a.Options = append(a.Options, x)
		}
	}
	return a
}

func sameDNS(a, b spec.DNSConfig) bool {
	return slices.Equal(a.Servers, b.Servers) && slices.Equal(a.Search, b.Search) && slices.Equal(a.Options, b.Options)
}

// subnetsOf returns a network's subnets and gateways, sorted, as Observe
// compares them.
func subnetsOf(n Network) []string {
	var out []string
	for _, sn := range n.Subnets {
		out = append(out, sn.Prefix.String()+" via "+sn.Gateway.String())
	}
	slices.Sort(out)
	return out
}
