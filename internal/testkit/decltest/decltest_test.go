package decltest

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// TestBuilders: what each builder says reads back, through spec's own
// parser, as the declaration, roster or delta it names.
func TestBuilders(t *testing.T) {
	d := Declaration(4).Flag(spec.FlagOn).RosterGen(3).Apps(2).Names(3).Env("E", "a").AppEnv("app1", "E", "b").App("web", "nginx", "K", "v").Drop("app0").Value()
	if d.Machine != Machine || d.Generation != 4 || d.MeshNames != spec.FlagOn || d.Roster.Generation != 3 || !slices.Equal(d.Roster.Zones, []string{"internal"}) {
		t.Errorf("declaration = %+v", d)
	}
	if len(d.Roster.Names) != 3 || d.Roster.Names[SvcName(2)][0] != netip.MustParseAddr(SvcAddr(2)) {
		t.Errorf("names = %v", d.Roster.Names)
	}
	if len(d.Containers) != 2 || d.Containers[0].Name != "app1" || d.Containers[0].Env["E"] != "b" || d.Containers[0].Env["N"] != "1" ||
		d.Containers[1].Name != "web" || d.Containers[1].Image != "nginx" || d.Containers[1].Env["K"] != "v" {
		t.Errorf("containers = %+v", d.Containers)
	}
	c := Declaration(1).Container(App{Name: "edge", Image: "busybox", Command: []string{"sh", "-c", "sleep 1"}, StopTimeout: "5s", Networks: []string{"mesh"}}).Value().Containers[0]
	if !slices.Equal(c.Command, []string{"sh", "-c", "sleep 1"}) || c.StopTimeout != 5*time.Second || len(c.Networks) != 1 || c.Networks[0].Name != "mesh" {
		t.Errorf("container = %+v", c)
	}
	if r := NewRoster(7).Zones().Name("a.internal", "10.0.0.1", "10.0.0.2").Name("a.internal", "10.0.0.3").Value(); r.Generation != 7 || len(r.Zones) != 0 || fmt.Sprint(r.Names) != "map[a.internal:[10.0.0.3]]" {
		t.Errorf("roster = %+v", r)
	}
	x := Delta(5, 3, 4).SetMap(map[string]string{"b.internal": "10.0.0.2", "a.internal": "10.0.0.1"}).Remove("c.internal").Value()
	if x.From != 3 || x.To != 4 || len(x.Set) != 2 || !slices.Equal(x.Remove, []string{"c.internal"}) {
		t.Errorf("delta = %+v", x)
	}
	if got := string(Delta(5, 3, 4).SetMap(map[string]string{"b.internal": "1.1.1.1", "a.internal": "2.2.2.2"}).JSON()); got != `{"schema": 1, "machine": "ace", "generation": 5,
  "roster_delta": {"from": 3, "generation": 4, "set": {"a.internal": ["2.2.2.2"], "b.internal": ["1.1.1.1"]}, "remove": []}}` {
		t.Errorf("delta document, names sorted:\n%s", got)
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }

// TestVerdict: a verdict passes the error it names and fails every other.
func TestVerdict(t *testing.T) {
	errX := errors.New("x")
	for _, tc := range []struct {
		name string
		v    Verdict
		err  error
		ok   bool
	}{
		{"taken_nil", Taken, nil, true},
		{"taken_refused", Taken, errX, false},
		{"refused_nil", Refused(errX, ""), nil, false},
		{"refused_is", Refused(errX, ""), fmt.Errorf("w: %w", errX), true},
		{"refused_other", Refused(errX, ""), errors.New("y"), false},
		{"refused_says", Refused(nil, "gen 3"), errors.New("at gen 3"), true},
		{"refused_says_other", Refused(nil, "gen 3"), errors.New("at gen 4"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			tc.v.Check(r, "push", tc.err)
			if r.failed == tc.ok {
				t.Errorf("Check(%v) failed %v, want %v", tc.err, r.failed, !tc.ok)
			}
		})
	}
}
