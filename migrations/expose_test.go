package migrations

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeResolver records what an Exposer makes of the resolver. Like
// resolver.Server, it refuses to listen twice on an address, or to stop
// listening where it does not.
type fakeResolver struct {
	mu        sync.Mutex
	listening map[netip.AddrPort]bool
	allow     []netip.Prefix
	forwards  map[netip.Prefix]netip.AddrPort
}

func newFakeResolver(static ...netip.AddrPort) *fakeResolver {
	f := &fakeResolver{listening: map[netip.AddrPort]bool{}, forwards: map[netip.Prefix]netip.AddrPort{}}
	for _, a := range static {
		f.listening[a] = true
	}
	return f
}

func (f *fakeResolver) Listen(a netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listening[a] {
		return fmt.Errorf("already listening on %s", a)
	}
	f.listening[a] = true
	return nil
}

func (f *fakeResolver) Unlisten(a netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.listening[a] {
		return fmt.Errorf("not listening on %s", a)
	}
	delete(f.listening, a)
	return nil
}

func (f *fakeResolver) SetAllow(p []netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allow = slices.Clone(p)
}

func (f *fakeResolver) SetLocalForward(client netip.Prefix, _ string, server netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if server.IsValid() {
		f.forwards[client] = server
	} else {
		delete(f.forwards, client)
	}
}

// state returns what the resolver listens on, allows (sorted) and forwards.
func (f *fakeResolver) state() (listening []string, allow []string, forwards []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for a := range f.listening {
		listening = append(listening, a.String())
	}
	for _, p := range f.allow {
		allow = append(allow, p.String())
	}
	for p, s := range f.forwards {
		forwards = append(forwards, p.String()+"->"+s.String())
	}
	slices.Sort(listening)
	slices.Sort(allow)
	slices.Sort(forwards)
	return listening, allow, forwards
}

func bridge(name string, third int, dns bool) Network {
	return Network{Name: name, Driver: "bridge", DNSEnabled: dns, Subnets: []Subnet{{
		Prefix:  netip.MustParsePrefix(fmt.Sprintf("10.201.%d.0/24", third)),
		Gateway: netip.MustParseAddr(fmt.Sprintf("10.201.%d.1", third)),
	}}}
}

// TestExposerRetain: networks gone give back their allowed subnets, local
// forwards and the listeners no remaining network needs; the node-local
// address stays while a network uses it, and an operator's --listen
// address always.
func TestExposerRetain(t *testing.T) {
	// 127.0.0.1 is assigned to every host's lo: the node-local strategy
	// works without adding an address. Nothing is sent anywhere.
	nodeLocal := "127.0.0.1:53"
	static := netip.MustParseAddrPort("10.201.2.1:53") // the operator's --listen, on b's gateway
	res := newFakeResolver(static)
	var logs bytes.Buffer
	e, err := NewExposer(ExposerConfig{
		Resolver: res, NodeLocal: netip.MustParseAddr("127.0.0.1"), Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")},
		Static: []netip.AddrPort{static}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c, d := bridge("a", 1, false), bridge("b", 2, false), bridge("c", 3, true), bridge("d", 4, false)
	for _, x := range []struct {
		n Network
		s Strategy
	}{{a, StrategyGateway}, {b, StrategyGateway}, {c, StrategyNodeLocal}, {d, StrategyNodeLocal}} {
		if _, err := e.Expose(x.n, x.s); err != nil {
			t.Fatalf("Expose(%s, %s): %v", x.n.Name, x.s, err)
		}
	}
	// Exposing again changes nothing, and is no error (the agent does it
	// every pass).
	if _, err := e.Expose(a, StrategyGateway); err != nil {
		t.Fatalf("Expose(a) again: %v", err)
	}

	type want struct{ listening, allow, forwards []string }
	check := func(step string, w want) {
		t.Helper()
		l, al, f := res.state()
		if diff := cmp.Diff(w, want{l, al, f}, cmp.AllowUnexported(want{})); diff != "" {
			t.Errorf("%s: resolver (-want +got):\n%s", step, diff)
		}
	}
	check("all exposed", want{
		listening: []string{"10.201.1.1:53", "10.201.2.1:53", nodeLocal},
		// The node-local address answers as a client too: aardvark-dns
		// forwards to it from it (podman 4.4 and later).
		allow:    []string{"10.201.1.0/24", "10.201.2.0/24", "10.201.3.0/24", "10.201.4.0/24", "127.0.0.1/32", "192.0.2.0/24"},
		forwards: []string{"10.201.3.0/24->10.201.3.1:53"},
	})

	// a and c are gone: a's gateway is closed; the node-local address
	// stays, for d.
	e.Retain([]Network{b, d})
	check("a and c gone", want{
		listening: []string{"10.201.2.1:53", nodeLocal},
		allow:     []string{"10.201.2.0/24", "10.201.4.0/24", "127.0.0.1/32", "192.0.2.0/24"},
	})
	for _, line := range []string{
		`the resolver stops listening on its address" component=migrations network=a addr=10.201.1.1:53`,
		`its subnet may no longer query the resolver" component=migrations network=a subnet=10.201.1.0/24`,
		`its subnet may no longer query the resolver" component=migrations network=c subnet=10.201.3.0/24`,
		`no longer forwards its subnet's container names" component=migrations network=c subnet=10.201.3.0/24`,
	} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %q:\n%s", line, logs.String())
		}
	}
	if strings.Contains(logs.String(), "addr="+nodeLocal) {
		t.Errorf("the node-local address was taken back while d uses it:\n%s", logs.String())
	}

	// The allow list the operator changes keeps the networks' subnets.
	e.SetAllow(nil)
	check("allow list changed", want{
		listening: []string{"10.201.2.1:53", nodeLocal},
		allow:     []string{"10.201.2.0/24", "10.201.4.0/24", "127.0.0.1/32"},
	})

	// Every network gone: the node-local address goes with the last one
	// using it; the operator's address on b's gateway stays.
	e.Retain(nil)
	check("all gone", want{listening: []string{"10.201.2.1:53"}})
	if !strings.Contains(logs.String(), `network=d addr=`+nodeLocal) {
		t.Errorf("log lacks the node-local address taken back from d:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "addr=10.201.2.1:53") {
		t.Errorf("the operator's --listen address was taken back:\n%s", logs.String())
	}

	// A network exposed again after it was gone is served again.
	if _, err := e.Expose(a, StrategyGateway); err != nil {
		t.Fatalf("Expose(a) after it came back: %v", err)
	}
	check("a back", want{listening: []string{"10.201.1.1:53", "10.201.2.1:53"}, allow: []string{"10.201.1.0/24"}})
}

// TestExposerRecreatedNetwork: a network recreated under its name with
// other addresses is a new network: the old one's gateway is closed, at
// the next Retain or when the new one is exposed first.
func TestExposerRecreatedNetwork(t *testing.T) {
	for _, retainFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("retain first %v", retainFirst), func(t *testing.T) {
			res := newFakeResolver()
			e, err := NewExposer(ExposerConfig{Resolver: res})
			if err != nil {
				t.Fatal(err)
			}
			old, recreated := bridge("a", 1, false), bridge("a", 5, false)
			if _, err := e.Expose(old, StrategyGateway); err != nil {
				t.Fatal(err)
			}
			if retainFirst {
				e.Retain([]Network{recreated})
			}
			if _, err := e.Expose(recreated, StrategyGateway); err != nil {
				t.Fatal(err)
			}
			e.Retain([]Network{recreated})
			l, al, _ := res.state()
			if diff := cmp.Diff([]string{"10.201.5.1:53"}, l); diff != "" {
				t.Errorf("listening (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]string{"10.201.5.0/24"}, al); diff != "" {
				t.Errorf("allowed (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunnerExposesThroughSharedExposer: what a Runner's probe exposed is
// the shared Exposer's, and goes with its network (issue 7: the Runner
// kept a deleted network's subnets allowed and its gateway listened on).
func TestRunnerExposesThroughSharedExposer(t *testing.T) {
	res := newFakeResolver()
	e, err := NewExposer(ExposerConfig{Resolver: res})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRunner(RunnerConfig{Runtime: &fakeProbes{containers: map[string]ProbeContainer{}}, Exposer: e,
		Image: "img", Zone: "internal", Outside: "example.org", Owner: "ace"})
	if err != nil {
		t.Fatal(err)
	}
	a, b := bridge("a", 1, false), bridge("b", 2, false)
	// The fake probe containers print nothing, so the probes fail; the
	// listeners they opened stay while their networks exist.
	for _, p := range r.Probe(context.Background(), []Network{a, b}, nil) {
		if p.Pass {
			t.Fatalf("probe of %s passed with a silent probe container", p.Network)
		}
	}
	if l, _, _ := res.state(); !slices.Equal(l, []string{"10.201.1.1:53", "10.201.2.1:53"}) {
		t.Fatalf("after the probes, listening on %v; want both gateways", l)
	}
	e.Retain([]Network{b})
	l, al, _ := res.state()
	if !slices.Equal(l, []string{"10.201.2.1:53"}) || !slices.Equal(al, []string{"10.201.2.0/24"}) {
		t.Errorf("after a was deleted: listening on %v, allowing %v; want b's gateway and subnet only", l, al)
	}
}
