package specjson

import (
	"slices"
	"strings"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// ParseDeclaration reads a declaration document strictly: unknown fields,
// wrong types, duplicate keys or container names, unknown or cyclic
// depends_on and names that could inject a line into /etc/hosts are all
// faults. It returns every fault, each a *spec.FieldError naming its path
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
func ParseDeclaration(data []byte) (*spec.Declaration, error) {
	return Reader{}.ParseDeclaration(data)
}

// ParseDeclaration is the package's ParseDeclaration, stepping aside while
// rd.Busy says other work waits.
func (rd Reader) ParseDeclaration(data []byte) (*spec.Declaration, error) {
	if err := CheckSize(int64(len(data))); err != nil {
		return nil, err
	}
	y := &yield.Yielder{Pending: rd.Busy}
	d, ok, overNames := parseDeclarationFast(data, y)
	switch {
	case ok:
		return d, nil
	case overNames:
		return nil, tooManyNames("roster.names")
	}
	return parseDeclarationStrict(data, y)
}

// parseDeclarationFast reads a declaration without faults whose roster the
// fast roster reader takes (decodeRosterFast): the roster is read straight
// into place, the rest of the document (small) by the strict reader. With
// 100,000 names that is a third of the time and a tenth of the garbage of
// reading the roster as a JSON tree. It reports false for anything else,
// and ParseDeclaration reads the whole document strictly, naming every
// fault; FuzzParseDeclaration checks both give the same declaration.
func parseDeclarationFast(data []byte, y *yield.Yielder) (_ *spec.Declaration, ok, overNames bool) {
	start, end, ok := topLevelMember(data, "roster")
	if !ok {
		return nil, false, false
	}
	r, ok, overNames := decodeRosterCounting(data[start:end], y)
	if !ok {
		return nil, false, overNames
	}
	rest := make([]byte, 0, len(data)-(end-start)+4)
	rest = append(append(append(rest, data[:start]...), "null"...), data[end:]...)
	v, err := strictjson.Parse(rest)
	if err != nil {
		return nil, false, false
	}
	var rep strictjson.Report
	d := readDeclaration(&rep, v, r)
	if mergeFaults(rep, d.ValidateYielding(y.Maybe)) != nil {
		return nil, false, false
	}
	return d, true, false // decodeRosterFast returns a normalized roster
}

func parseDeclarationStrict(data []byte, y *yield.Yielder) (*spec.Declaration, error) {
	v, err := strictjson.Parse(data)
	if err != nil {
		return nil, &spec.FieldError{Reason: err.Error()}
	}
	var rep strictjson.Report
	d := readDeclaration(&rep, v, nil)
	if err := mergeFaults(rep, d.ValidateYielding(y.Maybe)); err != nil {
		return nil, err
	}
	d.Roster = d.Roster.Normalize()
	return d, nil
}

// readHead reads what a declaration and a declaration delta both begin
// with: the schema (one this meshhost reads), the machine and the
// generation.
func readHead(rep *strictjson.Report, o *strictjson.Object) (schema int, machine string, gen uint64) {
	if sv, p, ok := o.Required("schema"); ok {
		if n, ok := rep.Int(p, sv, 1, 1<<31); ok {
			if n > spec.SchemaVersion {
				rep.Add(p, "schema %d is newer than this meshhost reads (%d); upgrade meshhost", n, spec.SchemaVersion)
			}
			schema = int(n)
		}
	}
	if mv, p, ok := o.Required("machine"); ok {
		machine, _ = rep.String(p, mv)
	}
	if gv, p, ok := o.Required("generation"); ok {
		gen, _ = rep.Uint(p, gv, 1, 1<<63-1)
	}
	return schema, machine, gen
}

// readDeclaration reads a parsed declaration; roster, when not nil, is its
// roster read already (the document's roster member is then a placeholder).
func readDeclaration(rep *strictjson.Report, v strictjson.Value, roster *spec.Roster) *spec.Declaration {
	o := rep.Object("", v)
	d := &spec.Declaration{MeshNames: spec.FlagOff}
	d.Schema, d.Machine, d.Generation = readHead(rep, o)
	if fv, p, ok := o.Field("mesh_names"); ok {
		if s, ok := rep.String(p, fv); ok {
			d.MeshNames = spec.MeshNamesFlag(s)
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

// mergeFaults reports the faults found while reading and those of validating
// what could be read, leaving out validation faults at or below a path that
// already has a reading fault (a missing name is not also a bad name).
func mergeFaults(rep strictjson.Report, validation error) error {
	var errs spec.FaultList
	for _, f := range rep.Faults {
		errs.Add(f.Path, "%s", f.Reason)
	}
	if validation != nil {
		for _, e := range unjoin(validation) {
			fe, ok := e.(*spec.FieldError)
			if ok && slices.ContainsFunc(rep.Faults, func(f strictjson.Fault) bool {
				return fe.Path == f.Path || strings.HasPrefix(fe.Path, f.Path+".") || strings.HasPrefix(fe.Path, f.Path+"[")
			}) {
				continue
			}
			errs.AddErr(e)
		}
	}
	return errs.Err()
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
