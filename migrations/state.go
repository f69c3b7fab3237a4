package migrations

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/spec"
)

// StateVersion is the version of the gate's state file this meshhost writes
// and the newest it reads.
//
// History:
//
//	1: first version: the flag last seen, the pause flag, when the machine
//	   switched under "auto", and per network its kind, whether the runtime
//	   still reports it, its last probe, the strategy and DNS configuration
//	   proven (and when), consecutive failures, and whether (since when) it
//	   is in resolve mode.
//
//	   Later, within version 1: "settings", the switch's settings of the
//	   gate that sets them (the agent's --proof-max-age; see Settings).
//	   It needs no new version: a meshhost that does not know it reads
//	   the rest as before and judges with its defaults, as it always did,
//	   while a new version would make it refuse the file, and a
//	   downgraded agent not start. A file without it is read with none
//	   recorded: the defaults, until the agent writes it.
//
//	   Later, within version 1: "used_networks", the networks the
//	   declared containers use (Gate.Declare), which alone hold the
//	   switch under "auto" back. No new version, for the same reasons: a
//	   meshhost that does not know it waits for every network, as it always
//	   did (and drops the field when it writes the file, until the agent
//	   records it again). A file without it is read as not knowing: every
//	   network the runtime reports holds "auto" back, until the agent's
//	   next pass records the declaration's.
const StateVersion = 1

// State is what the gate keeps across restarts.
type State struct {
	Version int                `json:"version"`
	Flag    spec.MeshNamesFlag `json:"flag"`
	Paused  bool               `json:"paused"`
	// PausedAt is when Pause was last called; zero when not paused.
	PausedAt time.Time `json:"paused_at,omitzero"`
	// AutoSwitchedAt is when every network had passed under "auto" and the
	// machine switched; zero before, and again after the flag went off.
	AutoSwitchedAt time.Time                `json:"auto_switched_at,omitzero"`
	Networks       map[string]*NetworkState `json:"networks"`
	// Used are the networks the declared containers use, sorted
	// (UsedNetworks of the declaration last given to Gate.Declare): under
	// "auto" only those hold the switch back. Nil: not recorded yet, and
	// every network holds it back; empty: no container is declared.
	Used []string `json:"used_networks,omitzero"`
	// Settings are those of the gate that sets them (the agent's), for
	// those that do not (operator commands).
	Settings Settings `json:"settings,omitzero"`
}

// Settings are what a gate judges the switch with besides the state
// (GateConfig's fields of the same names). A gate whose config sets one
// records it here; one whose config leaves it zero takes it from here,
// and the default when this is zero too.
type Settings struct {
	// MaxProofAge is how old a passing probe may be and still switch a
	// network (GateConfig.MaxProofAge).
	MaxProofAge time.Duration `json:"max_proof_age_ns,omitempty"`
	// RollbackAfter is how many failed probes in a row take a network in
	// resolve mode back to copy mode (GateConfig.RollbackAfter).
	RollbackAfter int `json:"rollback_after,omitempty"`
	// NodeLocal and Loopback are the addresses the agent's resolver is
	// exposed on for StrategyNodeLocal, and StrategyAardvark and
	// StrategyLoopback
	// (GateConfig's fields of the same names): a proof of another
	// address (a probe run with other flags) proves a nameserver nobody
	// serves, and switches nothing. Zero: the defaults.
	NodeLocal netip.Addr `json:"node_local,omitzero"`
	Loopback  netip.Addr `json:"loopback,omitzero"`
}

// proofMismatch says why proof p, of a network, does not prove the
// resolver the agent exposes (the addresses set records), or "".
func (set Settings) proofMismatch(p *Proof) string {
	var want netip.Addr
	switch p.Strategy {
	case StrategyNodeLocal:
		want = cmp.Or(set.NodeLocal, netip.MustParseAddr(DefaultNodeLocal))
	case StrategyAardvark, StrategyLoopback:
		want = cmp.Or(set.Loopback, netip.MustParseAddr(DefaultLoopback))
	default:
		return "" // the network's own addresses (gateway), or none
	}
	if len(p.DNS.Servers) == 1 && p.DNS.Servers[0] == want {
		return ""
	}
	return fmt.Sprintf("the %s probe proved the DNS server %s, but the agent's resolver is exposed on %s for that strategy: probe again with the agent's addresses (meshhost probe --state takes them from the state directory)",
		p.Strategy, strings.Join(addrStrings(p.DNS.Servers), ","), want)
}

// proofUsable reports whether ns has a proof of the resolver the agent
// exposes.
func (s *State) proofUsable(ns *NetworkState) bool {
	return ns != nil && ns.Proven != nil && s.Settings.proofMismatch(ns.Proven) == ""
}

// NetworkState is one network's migration state.
type NetworkState struct {
	Kind Kind `json:"kind"`
	// Present: the runtime reported the network at the last Observe.
	Present bool `json:"present"`
	// Subnets are the network's subnets and gateways at the last Observe
	// ("10.89.0.0/24 via 10.89.0.1"); a change voids what was proven.
	Subnets []string `json:"subnets,omitempty"`
	// Last is the latest probe; nil before the first.
	Last *Result `json:"last,omitempty"`
	// Proven is the configuration the latest passing probe proved; it
	// stays after a failure, so the network keeps its configuration when
	// it recovers.
	Proven *Proof `json:"proven,omitempty"`
	// Failures counts failed probes since the last pass.
	Failures int `json:"failures"`
	// Resolve: containers on the network are (being) switched to resolve
	// mode, since ResolveSince.
	Resolve      bool      `json:"resolve"`
	ResolveSince time.Time `json:"resolve_since,omitzero"`
}

// Proof is a configuration a probe proved on a network.
type Proof struct {
	Strategy Strategy       `json:"strategy"`
	DNS      spec.DNSConfig `json:"dns"`
	At       time.Time      `json:"at"`
}

func newState() *State {
	return &State{Version: StateVersion, Flag: spec.FlagOff, Networks: map[string]*NetworkState{}}
}

// LoadState reads the gate's state file at path. A missing file is a fresh
// state (flag off, nothing proven).
func LoadState(path string) (*State, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return newState(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading migration state: %w", err)
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("reading migration state %q: %w", path, err)
	}
	if head.Version < 1 || head.Version > StateVersion {
		return nil, fmt.Errorf("reading migration state %q: version %d is not one this meshhost reads (1 to %d); upgrade meshhost", path, head.Version, StateVersion)
	}
	s := newState()
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("reading migration state %q: %w", path, err)
	}
	if s.Networks == nil {
		s.Networks = map[string]*NetworkState{}
	}
	s.Version = StateVersion
	return s, nil
}

// save writes s to path atomically: a temporary file, fsync, rename, and
// an fsync of the directory.
func (s *State) save(path string) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding migration state: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("saving migration state: %w", err)
	}
	if err := atomicfile.Write(path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("saving migration state: %w", err)
	}
	return nil
}

func (s *State) clone() *State {
	data, _ := json.Marshal(s)
	c := newState()
	json.Unmarshal(data, c)
	if c.Networks == nil {
		c.Networks = map[string]*NetworkState{}
	}
	return c
}

// ProofMismatch says why the proof network name holds does not prove the
// resolver the agent exposes (the addresses the state records), or "":
// such a proof switches nothing (meshhost migrate status shows why).
func (s *State) ProofMismatch(name string) string {
	ns := s.Networks[name]
	if ns == nil || ns.Proven == nil {
		return ""
	}
	return s.Settings.proofMismatch(ns.Proven)
}
