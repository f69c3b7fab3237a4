package main

import (
	"net/netip"
	"slices"
	"time"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/spec"
)

// The JSON the commands print: snake_case keys, durations as float seconds
// under names ending in _seconds, times in RFC 3339. Where a library's type
// is also a file format (the journal's entries, the migration gate's
// results) the command prints a view of it here, so that neither format
// changes for the other.

// historyEntryJSON is one entry of `meshhost history --output json`.
type historyEntryJSON struct {
	Time        time.Time                 `json:"time"`
	Kind        string                    `json:"kind"` // declaration, roster (a roster that moved alone) or pass
	Declaration *journal.DeclarationEntry `json:"declaration,omitempty"`
	Roster      *journal.RosterEntry      `json:"roster,omitempty"`
	Pass        *passJSON                 `json:"pass,omitempty"`
}

// passJSON is a pass: Actions are what it planned, Done how many of them
// it did; Deferred (by the budget), Frozen and Failed the rest.
type passJSON struct {
	Seq             uint64       `json:"seq"` // the pass's number, its log lines' pass=
	Generation      uint64       `json:"generation,omitempty"`
	DurationSeconds float64      `json:"duration_seconds"`
	Planned         int          `json:"planned"`
	Done            int          `json:"done"`
	Deferred        int          `json:"deferred,omitempty"`
	Frozen          int          `json:"frozen,omitempty"`
	Failed          int          `json:"failed,omitempty"`
	Actions         []actionView `json:"actions"`
	// Holds are the holds the pass met first; Released those it found
	// released.
	Holds    []holdJSON `json:"holds,omitempty"`
	Released []holdJSON `json:"released,omitempty"`
}

// holdJSON is a hold (journal.Hold) with the command that releases it.
type holdJSON struct {
	journal.Hold
	Release string `json:"release"`
}

func holdsJSON(hs []journal.Hold) []holdJSON {
	var out []holdJSON
	for _, h := range hs {
		out = append(out, holdJSON{h, h.Command()})
	}
	return out
}

type actionView struct {
	Kind            string  `json:"kind"`
	Container       string  `json:"container"`
	Reason          string  `json:"reason,omitempty"`
	ID              string  `json:"id,omitempty"`
	NewID           string  `json:"new_id,omitempty"`
	Deferred        bool    `json:"deferred,omitempty"`
	Frozen          bool    `json:"frozen,omitempty"`
	Error           string  `json:"error,omitempty"`
	DurationSeconds float64 `json:"duration_seconds"`
}

func historyJSON(entries []journal.Entry) []historyEntryJSON {
	out := make([]historyEntryJSON, 0, len(entries))
	for _, e := range entries {
		h := historyEntryJSON{Time: e.Time.UTC()}
		switch {
		case e.Declaration != nil:
			// Not the document: env and label values may be secrets.
			s := e.Declaration.Summary()
			h.Kind, h.Declaration = "declaration", &s
		case e.Roster != nil:
			h.Kind, h.Roster = "roster", e.Roster
		case e.Pass != nil:
			p := e.Pass
			h.Kind = "pass"
			h.Pass = &passJSON{Seq: p.Seq, Generation: p.Generation, DurationSeconds: p.Duration.Seconds(), Deferred: p.Deferred, Planned: len(p.Actions),
				Actions: []actionView{}, Holds: holdsJSON(p.Holds), Released: holdsJSON(p.Released)}
			for _, a := range p.Actions {
				h.Pass.Actions = append(h.Pass.Actions, actionView{a.Kind, a.Container, a.Reason, a.ID, a.NewID, a.Deferred, a.Frozen, a.Err, a.Duration.Seconds()})
				switch {
				case a.Err != "":
					h.Pass.Failed++
				case a.Frozen:
					h.Pass.Frozen++
				case a.Done():
					h.Pass.Done++
				}
			}
		}
		out = append(out, h)
	}
	return out
}

// probeResultJSON is one network of `meshhost probe --output json`.
type probeResultJSON struct {
	Network         string        `json:"network"`
	Driver          string        `json:"driver"`
	Kind            string        `json:"kind"`
	Pass            bool          `json:"pass"`
	At              time.Time     `json:"at"`
	Strategy        string        `json:"strategy,omitempty"`
	Reason          string        `json:"reason"`
	LatencySeconds  float64       `json:"latency_seconds"`
	DurationSeconds float64       `json:"duration_seconds"`
	Runtime         string        `json:"runtime"`
	DNS             dnsJSON       `json:"dns"`
	Attempts        []attemptJSON `json:"attempts,omitempty"`
	// Used (`meshhost probe --state`): a container of the agent's
	// declaration uses the network; one none uses does not hold flag auto
	// back. Absent without --state, or before the agent recorded it.
	Used *bool `json:"used,omitempty"`
}

type attemptJSON struct {
	Strategy        string  `json:"strategy"`
	Pass            bool    `json:"pass"`
	Reason          string  `json:"reason"`
	LatencySeconds  float64 `json:"latency_seconds"`
	DurationSeconds float64 `json:"duration_seconds"`
}

type dnsJSON struct {
	Servers []netip.Addr `json:"servers"`
	Search  []string     `json:"search"`
	Options []string     `json:"options"`
}

func dnsOf(d spec.DNSConfig) dnsJSON {
	return dnsJSON{Servers: orEmpty(d.Servers), Search: orEmpty(d.Search), Options: orEmpty(d.Options)}
}

func probeJSON(results []migrations.Result) []probeResultJSON {
	out := make([]probeResultJSON, 0, len(results))
	for _, r := range results {
		p := probeResultJSON{Network: r.Network, Driver: r.Driver, Kind: string(r.Kind), Pass: r.Pass, At: r.At.UTC(), Strategy: string(r.Strategy),
			Reason: r.Reason, LatencySeconds: r.Latency.Seconds(), DurationSeconds: r.Duration.Seconds(), Runtime: r.Runtime, DNS: dnsOf(r.DNS)}
		for _, a := range r.Attempts {
			p.Attempts = append(p.Attempts, attemptJSON{string(a.Strategy), a.Pass, a.Reason, a.Latency.Seconds(), a.Duration.Seconds()})
		}
		out = append(out, p)
	}
	return out
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// migrateStateJSON is the gate's state in `meshhost migrate status
// --output json`.
type migrateStateJSON struct {
	Version        int                           `json:"version"`
	Flag           string                        `json:"flag"`
	Paused         bool                          `json:"paused"`
	PausedAt       *time.Time                    `json:"paused_at,omitempty"`
	AutoSwitchedAt *time.Time                    `json:"auto_switched_at,omitempty"`
	Networks       map[string]migrateNetworkJSON `json:"networks"`
	// Auto is what flag auto waits for; under another flag, nil.
	Auto *autoJSON `json:"auto,omitempty"`
}

// autoJSON is migrations.AutoStatus.
type autoJSON struct {
	SwitchedAt *time.Time `json:"switched_at,omitempty"`
	// Holding: networks a declared container uses whose probe has not
	// passed: the machine waits for them.
	Holding []string `json:"holding"`
	// Unused: networks no declared container uses: probed, not waited for.
	Unused []string `json:"unused"`
	// UsedKnown: the state records which networks the declared containers
	// use; false: every network holds the machine back.
	UsedKnown bool `json:"used_known"`
}

type migrateNetworkJSON struct {
	Kind         string           `json:"kind"`
	Present      bool             `json:"present"`
	Subnets      []string         `json:"subnets"`
	Last         *probeResultJSON `json:"last,omitempty"`
	Proven       *proofJSON       `json:"proven,omitempty"`
	Failures     int              `json:"failures"`
	Resolve      bool             `json:"resolve"`
	ResolveSince *time.Time       `json:"resolve_since,omitempty"`
	// Used: a declared container uses the network (under flag auto only
	// those hold the machine back); absent when the state does not record
	// the declaration's networks yet.
	Used *bool `json:"used,omitempty"`
}

type proofJSON struct {
	Strategy string    `json:"strategy"`
	DNS      dnsJSON   `json:"dns"`
	At       time.Time `json:"at"`
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func migrateStateOf(st *migrations.State, auto migrations.AutoStatus) migrateStateJSON {
	out := migrateStateJSON{Version: st.Version, Flag: string(st.Flag), Paused: st.Paused, PausedAt: timeOrNil(st.PausedAt),
		AutoSwitchedAt: timeOrNil(st.AutoSwitchedAt), Networks: map[string]migrateNetworkJSON{}}
	if out.Flag == "" {
		out.Flag = string(spec.FlagOff)
	}
	for name, n := range st.Networks {
		v := migrateNetworkJSON{Kind: string(n.Kind), Present: n.Present, Subnets: orEmpty(n.Subnets), Failures: n.Failures,
			Resolve: n.Resolve, ResolveSince: timeOrNil(n.ResolveSince), Used: usedOf(st, name)}
		if n.Last != nil {
			v.Last = &probeJSON([]migrations.Result{*n.Last})[0]
		}
		if p := n.Proven; p != nil {
			v.Proven = &proofJSON{Strategy: string(p.Strategy), DNS: dnsOf(p.DNS), At: p.At.UTC()}
		}
		out.Networks[name] = v
	}
	if st.Flag == spec.FlagAuto {
		out.Auto = &autoJSON{SwitchedAt: timeOrNil(auto.SwitchedAt), Holding: orEmpty(auto.Holding), Unused: orEmpty(auto.Unused), UsedKnown: auto.UsedKnown}
	}
	return out
}

// usedOf says whether a declared container uses network n, as st records
// the declaration; nil when it does not record it.
func usedOf(st *migrations.State, n string) *bool {
	if st.Used == nil {
		return nil
	}
	used := slices.Contains(st.Used, n)
	return &used
}
