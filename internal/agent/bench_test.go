package agent

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/agent/journal"
	"github.com/meshhost/meshhost/spec"
)

// declarationN is a declaration of n containers in resolve mode (flag on,
// the fixture's network proven) and names roster names; container
// changed (when >= 0) has image tag tag.
func declarationN(gen uint64, n, names, changed, tag int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "on", "roster": {"generation": 1, "zones": ["internal"], "names": {`, gen)
	for i := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"svc%d.node%d.internal": ["10.%d.%d.%d"]`, i, i%50, 64+i/65536, i/256%256, i%256)
	}
	b.WriteString(`}}, "containers": [`)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		img := 1
		if i == changed {
			img = tag
		}
		fmt.Fprintf(&b, `{"name": "svc-%05d", "image": "registry.internal/svc:%d", "env": {"PORT": "8080", "LOG": "info"},
		  "ports": [{"host_port": %d, "container_port": 8080}], "mounts": [{"type": "volume", "source": "data-%d", "target": "/data"}]}`,
			i, img, 10000+i%50000, i)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

// BenchmarkPass10000 times the agent's whole pass (save, roster, gate,
// one List, render, plan, apply, journal) on a machine of 10,000
// containers in resolve mode (in memory): "noop" with nothing new (the
// periodic pass), "one-changed" after a whole declaration in which one
// container's image changed (the pass replaces it; reading the
// declaration, the push's cost, is not timed).
func BenchmarkPass10000(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"noop", "one-changed"} {
		b.Run(kind, func(b *testing.B) {
			f := newFixture(b, true)
			f.push(b, declarationN(1, 10000, 100, -1, 0))
			if rep := f.agent.LastReport(); rep.Modes["svc-00001"] != string(spec.Resolve) {
				b.Fatalf("svc-00001 in mode %q, want resolve", rep.Modes["svc-00001"])
			}
			gen := uint64(1)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if kind == "one-changed" {
					b.StopTimer()
					gen++
					if _, err := f.source.Offer(declarationN(gen, 10000, 100, 4242, int(gen)), "bench"); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				rep, err := f.agent.Pass(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if want := map[string]int{"noop": 0, "one-changed": 1}[kind]; rep.Result.Count("replace") != want {
					b.Fatalf("the pass replaced %d, want %d", rep.Result.Count("replace"), want)
				}
			}
		})
	}
}

// BenchmarkRosterPush100k times what a roster change of one name costs
// the agent, at 100,000 names and 2 containers: the declaration source
// taking the document (Offer: reading it, validating it, finding what
// changed) and the pass that puts it in force (resolver, declaration
// saved, journal). "delta" pushes a declaration delta; "whole" the whole
// declaration, which differs by the same one name.
func BenchmarkRosterPush100k(b *testing.B) {
	ctx := context.Background()
	for _, kind := range []string{"delta", "whole"} {
		b.Run(kind, func(b *testing.B) {
			j, err := journal.Open(b.TempDir(), journal.Options{})
			if err != nil {
				b.Fatal(err)
			}
			f := newFixture(b, true, func(c *Config) { c.Journal = j })
			f.push(b, declaration(1, spec.FlagOn, 2, 100000))
			base := string(declaration(1, spec.FlagOn, 2, 100000))
			gen := uint64(1)
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				gen++
				var doc []byte
				if kind == "delta" {
					doc = fmt.Appendf(nil, `{"schema": 1, "machine": "ace", "generation": %d, "roster_delta": {"from": %d, "generation": %d, "set": {"moved%d.internal": ["10.200.0.1"]}}}`, gen, gen-1, gen, gen)
				} else {
					doc = []byte(strings.Replace(strings.Replace(base, `"generation": 1, "mesh_names"`, fmt.Sprintf(`"generation": %d, "mesh_names"`, gen), 1),
						`"roster": {"generation": 1, "zones": ["internal"], "names": {`, fmt.Sprintf(`"roster": {"generation": %d, "zones": ["internal"], "names": {"moved%d.internal": ["10.200.0.1"], `, gen, gen), 1))
				}
				b.StartTimer()
				c0 := cpuNow(b)
				if _, err := f.source.Offer(doc, "bench"); err != nil {
					b.Fatal(err)
				}
				rep, err := f.agent.Pass(ctx)
				if err != nil {
					b.Fatal(err)
				}
				cpu += cpuNow(b) - c0
				b.StopTimer()
				if rep.RosterGeneration != gen {
					b.Fatalf("roster %d in force, want %d", rep.RosterGeneration, gen)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuNow is the CPU time the process has used. The benchmarks read it
// inside the timed part: StartTimer and StopTimer read the memory
// statistics (a stop of the world) under ReportAllocs, which is the
// harness's cost, not the change's.
func cpuNow(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNATSRosterChange100k is what one name moving in a NATS roster
// of 100,000 names costs the agent: the watcher hands the Source the
// change alone (delta: PutRosterDelta) or the declaration with the whole
// roster (whole: Put, the only way before PutRosterDelta, and still the
// one after a declaration change or a gap), then Run's roster loop saves
// it and puts it in force (rosterNow). The roster the watcher hands over
// whole is built outside the timer: the watcher's own cost is
// natssource's BenchmarkWatcherRosterChange100k.
func BenchmarkNATSRosterChange100k(b *testing.B) {
	for _, kind := range []string{"delta", "whole"} {
		b.Run(kind, func(b *testing.B) {
			f := newFixture(b, true)
			f.push(b, declaration(1, spec.FlagOn, 2, 100000))
			decl, _ := f.source.Current()
			names := decl.Roster.Names
			gen := decl.Roster.Generation
			var cpu time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				name := fmt.Sprintf("svc%d.node%d.internal", i%100000, i%100000%50)
				a := []netip.Addr{netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})}
				delta := &spec.RosterDelta{From: gen, To: gen + 1, Set: map[string][]netip.Addr{name: a}}
				var whole *spec.Declaration
				if kind == "whole" {
					next := maps.Clone(names)
					next[name] = a
					names = next
					d := *decl
					d.Roster = &spec.Roster{Generation: gen + 1, Zones: decl.Roster.Zones, Names: next}
					whole = &d
				}
				gen++
				b.StartTimer()
				c0 := cpuNow(b)
				var err error
				if kind == "delta" {
					err = f.source.PutRosterDelta("ace", decl.Generation, delta, "nats")
				} else {
					err = f.source.Put(whole, "nats")
				}
				if err != nil {
					b.Fatal(err)
				}
				if err := f.agent.rosterNow(); err != nil {
					b.Fatal(err)
				}
				cpu += cpuNow(b) - c0
				b.StopTimer()
				if r := f.srv.Roster(); r.Generation != gen {
					b.Fatalf("the resolver serves roster %d, want %d", r.Generation, gen)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
