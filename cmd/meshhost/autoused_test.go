package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/migrations"
	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// autoDeclaration is a flag-auto declaration of two containers on
// podman's default network (by omission), and with onLonely a third on
// the network lonely.
func autoDeclaration(gen uint64, onLonely bool) []byte {
	lonely := ""
	if onLonely {
		lonely = `, {"name": "old", "image": "busybox", "networks": [{"name": "lonely"}]}`
	}
	return []byte(fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "auto",
	  "roster": {"generation": %d, "zones": ["internal"], "names": {"a.internal": ["10.9.0.1"]}},
	  "containers": [{"name": "db", "image": "busybox"}, {"name": "web", "image": "busybox", "depends_on": ["db"]}%s]}`, gen, gen, lonely))
}

// provenExceptLonely records in dir's migration state what an agent's
// probes found: podman's default network passed (unless podmanFails),
// lonely (an --internal network with aardvark-dns) failed.
func provenExceptLonely(t *testing.T, gate *migrations.Gate, podmanFails ...bool) {
	t.Helper()
	podman := migrations.Network{Name: "podman", Driver: "bridge",
		Subnets: []migrations.Subnet{{Prefix: netip.MustParsePrefix("10.88.0.0/16"), Gateway: netip.MustParseAddr("10.88.0.1")}}}
	lonely := migrations.Network{Name: "lonely", Driver: "bridge", Internal: true, DNSEnabled: true,
		Subnets: []migrations.Subnet{{Prefix: netip.MustParsePrefix("10.91.0.0/24"), Gateway: netip.MustParseAddr("10.91.0.1")}}}
	if _, err := gate.Observe([]migrations.Network{podman, lonely}); err != nil {
		t.Fatal(err)
	}
	podmanResult := migrations.Result{Network: "podman", Driver: "bridge", Kind: migrations.KindOf(podman), Pass: true, At: time.Now(),
		Strategy: migrations.StrategyGateway, DNS: spec.DNSConfig{Servers: []netip.Addr{netip.MustParseAddr("10.88.0.1")}}}
	if len(podmanFails) > 0 && podmanFails[0] {
		podmanResult = migrations.Result{Network: "podman", Driver: "bridge", Kind: migrations.KindOf(podman), At: time.Now(), Reason: "canary: i/o timeout"}
	}
	err := gate.Record([]migrations.Result{
		podmanResult,
		{Network: "lonely", Driver: "bridge", Kind: migrations.KindOf(lonely), At: time.Now(), Reason: "no strategy can work"},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPlanAgreesWithTheAgentOnUnusedNetworks: under auto, a machine held
// back by its only failing network (lonely), which one container uses,
// gets a declaration without that container: lonely is unused, so the
// machine switches. `meshhost plan` announces it as the agent's pass
// then does it, action for action: the container removed, the others
// replaced into resolve mode. (Plan judging with the networks of the
// declaration in force, not the one it plans, announces only the removal.)
// Then migrate status says the unused network holds nothing back.
func TestPlanAgreesWithTheAgentOnUnusedNetworks(t *testing.T) {
	state := t.TempDir()
	a, source, gate, rt := planAgent(t, state, false)
	ctx := context.Background()
	if _, err := source.Offer(autoDeclaration(1, true), "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	provenExceptLonely(t, gate)
	if a := gate.Auto(); !slices.Equal(a.Holding, []string{"lonely"}) {
		t.Fatalf("setup: auto = %+v, want lonely holding the machine", a)
	}

	next := autoDeclaration(2, false)
	var planned struct {
		Actions []actionJSON `json:"actions"`
	}
	planJSON(t, rt, state, next, &planned)
	if !mustLoadState(t, statedir.New(state)).AutoSwitchedAt.IsZero() {
		t.Fatal("meshhost plan wrote the agent's migration state")
	}

	if _, err := source.Offer(next, "test"); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type step struct{ Kind, Container string }
	var did, announced []step
	for _, o := range rep.Result.Outcomes {
		if o.Kind != reconcile.Keep {
			did = append(did, step{string(o.Kind), o.Name})
		}
	}
	for _, p := range planned.Actions {
		announced = append(announced, step{p.Kind, p.Container})
	}
	if diff := cmp.Diff(did, announced); diff != "" {
		t.Errorf("meshhost plan and the agent's pass differ (-agent +plan):\n%s", diff)
	}
	if want := []step{{"remove", "old"}, {"replace", "db"}, {"replace", "web"}}; !cmp.Equal(want, did) {
		t.Errorf("the pass did %v, want %v: the machine switches past the unused network", did, want)
	}
	for _, name := range []string{"db", "web"} {
		if rep.Modes[name] != "resolve" {
			t.Errorf("%s in %q mode, want resolve", name, rep.Modes[name])
		}
	}

	// migrate status: the network is reported, marked unused, and said not
	// to hold the machine.
	code, out, errOut := runCLI(t, nil, "migrate", "status", "--state", state, "--machine", "ace", "--output", "json")
	var status struct {
		State migrateStateJSON `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil {
		t.Fatalf("meshhost migrate status --output json (exit %d): %v\n%s%s", code, err, out, errOut)
	}
	lonely, ok := status.State.Networks["lonely"]
	if !ok || lonely.Used == nil || *lonely.Used || lonely.Resolve {
		t.Errorf("migrate status: lonely = %+v, want reported, not used, in copy mode", lonely)
	}
	if podman := status.State.Networks["podman"]; podman.Used == nil || !*podman.Used {
		t.Errorf("migrate status: podman = %+v, want used", podman)
	}
	if au := status.State.Auto; au == nil || au.SwitchedAt == nil || !slices.Equal(au.Unused, []string{"lonely"}) || len(au.Holding) != 0 {
		t.Errorf("migrate status: auto = %+v, want switched, lonely unused, nothing holding", au)
	}
	_, out, _ = runCLI(t, nil, "migrate", "status", "--state", state, "--machine", "ace")
	t.Logf("meshhost migrate status:\n%s", out)
	if !strings.Contains(out, "auto: no declared container uses lonely: it did not hold the switch back") {
		t.Errorf("migrate status does not say auto ignores lonely:\n%s", out)
	}
	row := slices.IndexFunc(strings.Split(out, "\n"), func(l string) bool {
		f := strings.Fields(l)
		return len(f) > 4 && f[0] == "lonely" && f[2] == "copy" && f[4] == "no"
	})
	if row < 0 {
		t.Errorf("migrate status has no row for lonely in copy mode, USED no:\n%s", out)
	}
}

// TestMigrateStatusNamesWhatAutoWaitsFor: before the switch, migrate
// status names the used networks auto waits for, and the unused ones it
// does not.
func TestMigrateStatusNamesWhatAutoWaitsFor(t *testing.T) {
	dir := statedir.New(t.TempDir())
	gate, err := migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	decl := &spec.Declaration{MeshNames: spec.FlagAuto, Containers: []spec.Container{
		{Name: "db", Image: "busybox", Networks: []spec.NetworkAttachment{{Name: "db-net"}}}, {Name: "web", Image: "busybox"}}}
	if err := gate.Declare(decl); err != nil {
		t.Fatal(err)
	}
	provenExceptLonely(t, gate) // db-net: not reported by the runtime yet
	_, out, _ := runCLI(t, nil, "migrate", "status", "--state", dir.Path(), "--machine", "ace")
	if st := mustLoadState(t, dir); st.AutoSwitchedAt.IsZero() {
		// podman passes, lonely is unused, and db-net, which no runtime
		// network is, holds nothing either.
		t.Errorf("the gate did not switch with every reported used network passing:\n%s", out)
	}
	if err := gate.Declare(&spec.Declaration{MeshNames: spec.FlagAuto, Containers: append(decl.Containers,
		spec.Container{Name: "late", Image: "busybox", Networks: []spec.NetworkAttachment{{Name: "lonely"}}})}); err != nil {
		t.Fatal(err)
	}
	_, out, _ = runCLI(t, nil, "migrate", "status", "--state", dir.Path(), "--machine", "ace")
	if !strings.Contains(out, "auto: the machine switched at") {
		t.Errorf("migrate status after the switch does not say so:\n%s", out)
	}

	// A fresh machine: lonely used, failing.
	dir = statedir.New(t.TempDir())
	gate, err = migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	if err := gate.Declare(&spec.Declaration{MeshNames: spec.FlagAuto, Containers: []spec.Container{
		{Name: "web", Image: "busybox"}, {Name: "late", Image: "busybox", Networks: []spec.NetworkAttachment{{Name: "lonely"}}}}}); err != nil {
		t.Fatal(err)
	}
	provenExceptLonely(t, gate)
	_, out, _ = runCLI(t, nil, "migrate", "status", "--state", dir.Path(), "--machine", "ace")
	if !strings.Contains(out, "auto: the machine keeps copied names until the networks its declared containers use pass their probe: waiting for lonely") {
		t.Errorf("migrate status does not name lonely as holding the machine:\n%s", out)
	}

	// The same, with lonely unused and podman not probed yet.
	dir = statedir.New(t.TempDir())
	gate, err = migrations.OpenGate(migrations.GateConfig{Path: dir.Migrations(), Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	if err := gate.Declare(&spec.Declaration{MeshNames: spec.FlagAuto, Containers: []spec.Container{{Name: "web", Image: "busybox"}}}); err != nil {
		t.Fatal(err)
	}
	provenExceptLonely(t, gate, true)
	_, out, _ = runCLI(t, nil, "migrate", "status", "--state", dir.Path(), "--machine", "ace")
	for _, want := range []string{"waiting for podman\n", "auto: not waiting for lonely: no declared container uses it"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate status does not say %q:\n%s", want, out)
		}
	}
}

func mustLoadState(t *testing.T, dir statedir.Dir) *migrations.State {
	t.Helper()
	s, err := migrations.LoadState(dir.Migrations())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
