package spec

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
)

// SchemaVersion is the declaration schema this meshhost writes and the newest
// it reads.
//
// History:
//
//	1: first version: machine, generation, mesh_names, roster, containers.
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

// ParseDeclaration reads a declaration document strictly: unknown fields,
// wrong types, duplicate keys or container names, unknown or cyclic
// depends_on and names that could inject a line into /etc/hosts are all
// faults. It returns every fault, each a *FieldError naming its path
// (`containers[3].stop_timeout: "6o s" is not a duration`), and never a
// half-parsed declaration.
//
// The format, with every container field:
//
//	{"schema": 1, "machine": "novox", "generation": 42, "mesh_names": "off",
//	 "roster": {"generation": 7, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}},
//	 "containers": [{
//	   "name": "postgres", "image": "docker.io/library/postgres:16",
//	   "command": ["postgres"], "entrypoint": ["docker-entrypoint.sh"],
//	   "env": {"POSTGRES_DB": "mesh"}, "working_dir": "/", "user": "999:999",
//	   "labels": {"team": "core"},
//	   "ports": [{"host_ip": "127.0.0.1", "host_port": 5432, "container_port": 5432, "protocol": "tcp"}],
//	   "mounts": [{"type": "volume", "source": "pgdata", "target": "/var/lib/postgresql/data", "read_only": false}],
//	   "networks": [{"name": "mesh", "aliases": ["db"], "ipv4": "10.89.0.5", "ipv6": "fd00::5"}],
//	   "restart": "on-failure:5", "stop_signal": "SIGINT", "stop_timeout": "2m",
//	   "healthcheck": {"test": ["pg_isready"], "interval": "10s", "timeout": "5s", "start_period": "30s", "retries": 5},
//	   "resources": {"memory": "1g", "cpus": "1.5", "pids": 512},
//	   "cap_add": ["NET_ADMIN"], "cap_drop": ["ALL"], "depends_on": ["vault"]}]}
func ParseDeclaration(data []byte) (*Declaration, error) {
	if d, ok := parseDeclarationFast(data); ok {
		return d, nil
	}
	return parseDeclarationStrict(data)
}

// parseDeclarationFast reads a declaration without faults whose roster the
// fast roster reader takes (decodeRosterFast): the roster is read straight
// into place, the rest of the document (small) by the strict reader. With
// 100,000 names that is a third of the time and a tenth of the garbage of
// reading the roster as a JSON tree. It reports false for anything else,
// and ParseDeclaration reads the whole document strictly, naming every
// fault; FuzzParseDeclaration checks both give the same declaration.
func parseDeclarationFast(data []byte) (*Declaration, bool) {
	start, end, ok := topLevelMember(data, "roster")
	if !ok {
		return nil, false
	}
	r, ok := decodeRosterFast(data[start:end])
	if !ok {
		return nil, false
	}
	rest := make([]byte, 0, len(data)-(end-start)+4)
	rest = append(append(append(rest, data[:start]...), "null"...), data[end:]...)
	v, err := strictjson.Parse(rest)
	if err != nil {
		return nil, false
	}
	var rep strictjson.Report
	d := readDeclaration(&rep, v, r)
	if mergeFaults(rep, d.Validate()) != nil {
		return nil, false
	}
	return d, true // decodeRosterFast returns a normalized roster
}

func parseDeclarationStrict(data []byte) (*Declaration, error) {
	v, err := strictjson.Parse(data)
	if err != nil {
		return nil, &FieldError{Reason: err.Error()}
	}
	var rep strictjson.Report
	d := readDeclaration(&rep, v, nil)
	if err := mergeFaults(rep, d.Validate()); err != nil {
		return nil, err
	}
	d.Roster = d.Roster.Normalize()
	return d, nil
}

// readDeclaration reads a parsed declaration; roster, when not nil, is its
// roster read already (the document's roster member is then a placeholder).
func readDeclaration(rep *strictjson.Report, v strictjson.Value, roster *Roster) *Declaration {
	o := rep.Object("", v)
	d := &Declaration{MeshNames: FlagOff}
	if sv, p, ok := o.Required("schema"); ok {
		if n, ok := rep.Int(p, sv, 1, 1<<31); ok {
			if n > SchemaVersion {
				rep.Add(p, "schema %d is newer than this meshhost reads (%d); upgrade meshhost", n, SchemaVersion)
			}
			d.Schema = int(n)
		}
	}
	if mv, p, ok := o.Required("machine"); ok {
		d.Machine, _ = rep.String(p, mv)
	}
	if gv, p, ok := o.Required("generation"); ok {
		d.Generation, _ = rep.Uint(p, gv, 1, 1<<63-1)
	}
	if fv, p, ok := o.Field("mesh_names"); ok {
		if s, ok := rep.String(p, fv); ok {
			d.MeshNames = MeshNamesFlag(s)
		}
	}
	if rv, p, ok := o.Required("roster"); ok {
		if roster != nil {
			d.Roster = roster
		} else {
			d.Roster = readRoster(rep, p, rv)
		}
	}
	if cv, p, ok := o.Required("containers"); ok {
		if items, ok := rep.Array(p, cv); ok {
			for i, item := range items {
				d.Containers = append(d.Containers, readContainer(rep, strictjson.Index(p, i), item))
			}
		}
	}
	o.Done()
	return d
}

var machineNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Validate reports every fault of a declaration built in code rather than
// parsed, each a *FieldError naming its path.
func (d *Declaration) Validate() error {
	var errs fieldErrors
	if d.Schema < 1 || d.Schema > SchemaVersion {
		errs.add("schema", "%d is not a schema this meshhost reads (1 to %d)", d.Schema, SchemaVersion)
	}
	if !machineNameRE.MatchString(d.Machine) {
		errs.add("machine", "%q is not a machine name (lowercase letters, digits and inner hyphens, at most 63)", d.Machine)
	}
	if d.Generation == 0 {
		errs.add("generation", "must be greater than 0")
	}
	switch d.MeshNames {
	case FlagOff, FlagAuto, FlagOn:
	default:
		errs.add("mesh_names", "%q is not a flag; want %q, %q or %q", d.MeshNames, FlagOff, FlagAuto, FlagOn)
	}
	if d.Roster == nil {
		errs.add("roster", "is required")
	} else if err := d.Roster.Validate(); err != nil {
		for _, e := range unjoin(err) {
			if fe, ok := e.(*FieldError); ok {
				errs.add("roster"+prefixPath(fe.Path), "%s", fe.Reason)
			} else {
				errs = append(errs, e)
			}
		}
	}
	index := map[string]int{}
	for i, c := range d.Containers {
		path := fmt.Sprintf("containers[%d]", i)
		validateContainer(&errs, path, c)
		if j, dup := index[c.Name]; dup && c.Name != "" {
			errs.add(path+".name", "%q is also the name of containers[%d]; container names are unique per machine", c.Name, j)
			continue
		}
		index[c.Name] = i
	}
	for i, c := range d.Containers {
		for j, dep := range c.DependsOn {
			path := fmt.Sprintf("containers[%d].depends_on[%d]", i, j)
			switch k, ok := index[dep]; {
			case !ok:
				errs.add(path, "%q is not a container of this declaration", dep)
			case k == i:
				errs.add(path, "%q depends on itself", dep)
			}
		}
	}
	if cycle := dependencyCycle(d.Containers); cycle != nil {
		i := index[cycle[0]]
		errs.add(fmt.Sprintf("containers[%d].depends_on", i), "cycle: %s", strings.Join(cycle, " -> "))
	}
	return errs.err()
}

// mergeFaults reports the faults found while reading and those of validating
// what could be read, leaving out validation faults at or below a path that
// already has a reading fault (a missing name is not also a bad name).
func mergeFaults(rep strictjson.Report, validation error) error {
	var errs fieldErrors
	for _, f := range rep.Faults {
		errs.add(f.Path, "%s", f.Reason)
	}
	if validation != nil {
		for _, e := range unjoin(validation) {
			fe, ok := e.(*FieldError)
			if ok && slices.ContainsFunc(rep.Faults, func(f strictjson.Fault) bool {
				return fe.Path == f.Path || strings.HasPrefix(fe.Path, f.Path+".") || strings.HasPrefix(fe.Path, f.Path+"[")
			}) {
				continue
			}
			errs = append(errs, e)
		}
	}
	return errs.err()
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
