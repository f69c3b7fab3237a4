package specjson

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
	"github.com/meshhost/meshhost/internal/plumbing/yield"
	"github.com/meshhost/meshhost/spec"
)

// ParseRoster reads a roster document, the format of the roster file and of
// the roster inside a declaration:
//
//	{"generation": 7,
//	 "zones": ["internal"],
//	 "names": {"gitea.novox.internal": ["10.89.0.7"],
//	           "searxng.zurag.be": ["100.64.0.9", "fd7a::9"]}}
//
// It returns a validated, normalized roster, or every fault found, each a
// *spec.FieldError naming the entry. Nothing half-parsed is ever returned.
func ParseRoster(data []byte) (*spec.Roster, error) { return Reader{}.ParseRoster(data) }

// ParseRoster is the package's ParseRoster, stepping aside while rd.Busy
// says other work waits.
func (rd Reader) ParseRoster(data []byte) (*spec.Roster, error) {
	if err := CheckSize(int64(len(data))); err != nil {
		return nil, err
	}
	y := &yield.Yielder{Pending: rd.Busy}
	r, ok, overNames := decodeRosterCounting(data, y)
	switch {
	case ok:
		return r, nil
	case overNames:
		return nil, tooManyNames("names")
	}
	return parseRosterStrict(data, y)
}

// parseRosterStrict is ParseRoster through the strict reader, which names
// every fault; ParseRoster takes it for any document the fast path declines.
func parseRosterStrict(data []byte, y *yield.Yielder) (*spec.Roster, error) {
	v, err := strictjson.Parse(data)
	if err != nil {
		return nil, &spec.FieldError{Reason: err.Error()}
	}
	var rep strictjson.Report
	r := readRoster(&rep, "", v)
	if err := faults(rep); err != nil {
		return nil, err
	}
	if err := r.ValidateYielding(y.Maybe); err != nil {
		return nil, err
	}
	return r.Normalize(), nil
}

func readRoster(rep *strictjson.Report, path string, v strictjson.Value) *spec.Roster {
	o := rep.Object(path, v)
	r := &spec.Roster{Names: map[string][]netip.Addr{}}
	if gv, p, ok := o.Required("generation"); ok {
		r.Generation, _ = rep.Uint(p, gv, 0, math.MaxInt64)
	}
	if zv, p, ok := o.Field("zones"); ok {
		r.Zones, _ = rep.Strings(p, zv)
	}
	if nv, p, ok := o.Required("names"); ok {
		readNames(rep, p, nv, r.Names)
	}
	o.Done()
	return r
}

// tooManyNames is the fault of a roster holding more than spec.MaxNames
// names, at path.
func tooManyNames(path string) error {
	return &spec.FieldError{Path: path, Reason: fmt.Sprintf("more than %d names; at most %d", spec.MaxNames, spec.MaxNames)}
}

func faults(rep strictjson.Report) error {
	var errs spec.FaultList
	for _, f := range rep.Faults {
		errs.Add(f.Path, "%s", f.Reason)
	}
	return errs.Err()
}

// readNames reads an object of names and their address lists at path into
// names, reporting every fault.
func readNames(rep *strictjson.Report, path string, v strictjson.Value, names map[string][]netip.Addr) {
	for _, m := range rep.Object(path, v).Members() {
		if list, ok := plainAddrs(m.Value); ok { // the common case, without formatting a path
			names[m.Key] = list
			continue
		}
		mp := strictjson.Join(path, m.Key)
		addrs, ok := rep.Strings(mp, m.Value)
		if !ok {
			continue
		}
		list := make([]netip.Addr, 0, len(addrs))
		for i, s := range addrs {
			a, err := netip.ParseAddr(s)
			if err != nil {
				rep.Add(strictjson.Index(mp, i), "%q is not an IP address", s)
				continue
			}
			list = append(list, a)
		}
		names[m.Key] = list
	}
}

// plainAddrs reads an array of address strings, or reports false for
// anything else (the caller then reads it again, naming every fault).
func plainAddrs(v strictjson.Value) ([]netip.Addr, bool) {
	if v.Kind != strictjson.KindArray {
		return nil, false
	}
	list := make([]netip.Addr, 0, len(v.Items))
	for _, item := range v.Items {
		if item.Kind != strictjson.KindString {
			return nil, false
		}
		a, err := netip.ParseAddr(item.String)
		if err != nil {
			return nil, false
		}
		list = append(list, a)
	}
	return list, true
}
