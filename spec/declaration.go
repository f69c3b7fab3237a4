package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// SchemaVersion is the declaration schema this meshhost writes and the newest
// it reads.
//
// History:
//
//	1: first version: machine, generation, mesh_names, roster, containers.
//	   Also read, without a new version (older meshhosts refuse them whole,
//	   as an unknown field): declaration deltas, a generation and a
//	   roster_delta in place of roster and containers (DeclarationDelta).
const SchemaVersion = 1

// MeshNamesFlag is the per-machine migration flag of the declaration.
type MeshNamesFlag string

const (
	// FlagOff keeps every container in Copy mode. It is also the rollback.
	FlagOff MeshNamesFlag = "off"
	// FlagAuto switches the machine to Resolve mode once the resolver is
	// proven reachable from every runtime network.
	FlagAuto MeshNamesFlag = "auto"
	// FlagOn switches the networks whose probe passed and reports the others.
	FlagOn MeshNamesFlag = "on"
)

// Declaration is what the mesh controller sends one machine: the containers
// it should run and the mesh's roster.
type Declaration struct {
	Schema     int
	Machine    string
	Generation uint64
	MeshNames  MeshNamesFlag // defaults to FlagOff: fail closed
	Roster     *Roster
	Containers []Container
}

// Container returns the declared container named name.
func (d *Declaration) Container(name string) (Container, bool) {
	i := slices.IndexFunc(d.Containers, func(c Container) bool { return c.Name == name })
	if i < 0 {
		return Container{}, false
	}
	return d.Containers[i], true
}

var machineNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Validate reports every fault of a declaration built in code rather than
// parsed, each a *FieldError naming its path.
func (d *Declaration) Validate() error { return d.ValidateYielding(nil) }

// ValidateYielding is Validate calling yield, when not nil, once per roster
// name (see Roster.ValidateYielding).
func (d *Declaration) ValidateYielding(yield func()) error {
	var errs FaultList
	validateHead(&errs, d.Schema, d.Machine, d.Generation)
	switch d.MeshNames {
	case FlagOff, FlagAuto, FlagOn:
	default:
		errs.Add("mesh_names", "%q is not a flag; want %q, %q or %q", d.MeshNames, FlagOff, FlagAuto, FlagOn)
	}
	if d.Roster == nil {
		errs.Add("roster", "is required")
	} else if err := d.Roster.ValidateYielding(yield); err != nil {
		for _, e := range unjoin(err) {
			if fe, ok := e.(*FieldError); ok {
				errs.Add("roster"+prefixPath(fe.Path), "%s", fe.Reason)
			} else {
				errs.AddErr(e)
			}
		}
	}
	if tooMany(&errs, "containers", len(d.Containers), MaxContainers, "containers") {
		return errs.Err() // judged no further: each would cost a machine's worth of checks
	}
	index := map[string]int{}
	var claims hostClaims
	for i, c := range d.Containers {
		path := fmt.Sprintf("containers[%d]", i)
		validateContainer(&errs, path, c)
		claims.check(&errs, d.Containers, i)
		if j, dup := index[c.Name]; dup && c.Name != "" {
			errs.Add(path+".name", "%q is also the name of containers[%d]; container names are unique per machine", c.Name, j)
			continue
		}
		index[c.Name] = i
	}
	for i, c := range d.Containers {
		if len(c.DependsOn) > MaxDependsOn {
			continue // validateContainer said so
		}
		for j, dep := range c.DependsOn {
			path := fmt.Sprintf("containers[%d].depends_on[%d]", i, j)
			switch k, ok := index[dep]; {
			case !ok:
				errs.Add(path, "%q is not a container of this declaration", dep)
			case k == i:
				errs.Add(path, "%q depends on itself", dep)
			}
		}
	}
	if cycle := dependencyCycle(d.Containers); cycle != nil {
		i := index[cycle[0]]
		errs.Add(fmt.Sprintf("containers[%d].depends_on", i), "cycle: %s", strings.Join(cycle, " -> "))
	}
	return errs.Err()
}

// validateHead reports the faults of what a declaration and a declaration
// delta share: schema, machine and generation.
func validateHead(errs *FaultList, schema int, machine string, generation uint64) {
	if schema < 1 || schema > SchemaVersion {
		errs.Add("schema", "%d is not a schema this meshhost reads (1 to %d)", schema, SchemaVersion)
	}
	if !machineNameRE.MatchString(machine) {
		errs.Add("machine", "%q is not a machine name (lowercase letters, digits and inner hyphens, at most 63)", machine)
	}
	if generation == 0 {
		errs.Add("generation", "must be greater than 0")
	}
}

// prefixPath joins a roster-relative path under "roster".
func prefixPath(p string) string {
	if p == "" || strings.HasPrefix(p, "[") {
		return p
	}
	return "." + p
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// dependencyCycle returns one depends_on cycle as a path of names whose last
// element repeats the first, or nil when there is none. Self-dependencies
// and unknown names are reported elsewhere and skipped here.
func dependencyCycle(cs []Container) []string {
	deps := map[string][]string{}
	for _, c := range cs {
		deps[c.Name] = c.DependsOn
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, d := range deps[n] {
			if _, known := deps[d]; !known || d == n {
				continue
			}
			switch state[d] {
			case onPath:
				start := slices.Index(path, d)
				return append(slices.Clone(path[start:]), d)
			case unseen:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, c := range cs {
		if state[c.Name] == unseen {
			if cyc := visit(c.Name); cyc != nil {
				return cyc
			}
		}
	}
	return nil
}
