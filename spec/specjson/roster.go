package spec

import (
	"encoding/json"
	"math"
	"net/netip"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
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
// *FieldError naming the entry. Nothing half-parsed is ever returned.
func ParseRoster(data []byte) (*Roster, error) {
	if r, ok := decodeRosterFast(data); ok {
		return r, nil
	}
	return parseRosterStrict(data)
}

// parseRosterStrict is ParseRoster through the strict reader, which names
// every fault; ParseRoster takes it for any document the fast path declines.
func parseRosterStrict(data []byte) (*Roster, error) {
	v, err := strictjson.Parse(data)
	if err != nil {
		return nil, &FieldError{Reason: err.Error()}
	}
	var rep strictjson.Report
	r := readRoster(&rep, "", v)
	if err := faults(rep); err != nil {
		return nil, err
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r.Normalize(), nil
}

func readRoster(rep *strictjson.Report, path string, v strictjson.Value) *Roster {
	o := rep.Object(path, v)
	r := &Roster{Names: map[string][]netip.Addr{}}
	if gv, p, ok := o.Required("generation"); ok {
		r.Generation, _ = rep.Uint(p, gv, 0, math.MaxInt64)
	}
	if zv, p, ok := o.Field("zones"); ok {
		r.Zones, _ = rep.Strings(p, zv)
	}
	if nv, p, ok := o.Required("names"); ok {
		names := rep.Object(p, nv)
		for _, m := range names.Members() {
			if list, ok := plainAddrs(m.Value); ok { // the common case, without formatting a path
				r.Names[m.Key] = list
				continue
			}
			mp := strictjson.Join(p, m.Key)
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
			r.Names[m.Key] = list
		}
	}
	o.Done()
	return r
}

func faults(rep strictjson.Report) error {
	var errs fieldErrors
	for _, f := range rep.Faults {
		errs.add(f.Path, "%s", f.Reason)
	}
	return errs.err()
}

// MarshalJSON writes r in the roster file format ParseRoster reads.
func (r *Roster) MarshalJSON() ([]byte, error) {
	names := make(map[string][]string, len(r.Names))
	for n, addrs := range r.Names {
		s := make([]string, len(addrs))
		for i, a := range addrs {
			s[i] = a.String()
		}
		names[n] = s
	}
	zones := r.Zones
	if zones == nil {
		zones = []string{}
	}
	return json.Marshal(struct {
		Generation uint64              `json:"generation"`
		Zones      []string            `json:"zones"`
		Names      map[string][]string `json:"names"`
	}{r.Generation, zones, names})
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
