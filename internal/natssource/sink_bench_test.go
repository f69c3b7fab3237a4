package natssource

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/spec"
)

// putOnly hides a Source's PutRosterDelta: the watcher puts every change
// whole, as it did before it knew DeltaSink.
type putOnly struct{ s *declsource.Source }

func (p putOnly) Put(d *spec.Declaration, origin string) error { return p.s.Put(d, origin) }

// BenchmarkWatcherRosterChange100k is what one roster commit of one name
// costs the agent's side of a watcher, at 100,000 names: the commit
// evaluated and handed to the agent's declsource.Source, as a delta
// (delta) or as the whole declaration (whole: the path before DeltaSink,
// and still the one after a declaration change or a gap). The bucket is
// fed in memory (no server), in the watcher's own goroutine's place.
func BenchmarkWatcherRosterChange100k(b *testing.B) {
	const n = 100000
	for _, kind := range []string{"delta", "whole"} {
		b.Run(kind, func(b *testing.B) {
			src := declsource.New(declsource.Config{Machine: "ace"})
			var sink Sink = src
			if kind == "whole" {
				sink = putOnly{src}
			}
			w, err := NewWatcher(Config{Server: Server{URL: "nats://127.0.0.1:1"}, Machine: "ace", Sink: sink})
			if err != nil {
				b.Fatal(err)
			}
			w.decl = &spec.Declaration{Schema: 1, Machine: "ace", Generation: 7, MeshNames: spec.FlagOff,
				Containers: []spec.Container{{Name: "app", Image: "busybox"}}}
			r := make(map[string][]netip.Addr, n)
			for i := range n {
				r[fmt.Sprintf("h%d.internal", i)] = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
			}
			var rev uint64
			var sum digest
			for name, a := range r {
				rev++
				w.observe(entry{key: NameKey(name), rev: rev, value: encodeAddrs(a), pending: 1})
				sum.toggle(entryDigest(name, a))
			}
			gen := uint64(1)
			commit := func() {
				rev++
				data, _ := json.Marshal(Commit{Version: 1, Generation: gen, Revision: rev - 1, Names: len(r), Digest: sum.String(), Zones: []string{"internal"}})
				w.observe(entry{key: CommitKey, rev: rev, value: data})
				w.evaluate(true)
			}
			commit()
			if h, ok := src.Head(); !ok || h.Names != n {
				b.Fatalf("the Source holds %+v, want %d names", h, n)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				name := fmt.Sprintf("h%d.internal", i%n)
				old := r[name]
				a := []netip.Addr{netip.AddrFrom4([4]byte{10, 200, byte(i >> 8), byte(i)})}
				if a[0] == old[0] {
					a[0] = netip.AddrFrom4([4]byte{10, 201, 0, 1})
				}
				sum.toggle(entryDigest(name, old))
				sum.toggle(entryDigest(name, a))
				r[name] = a
				gen++
				value := encodeAddrs(a)
				b.StartTimer()
				rev++
				w.observe(entry{key: NameKey(name), rev: rev, value: value, pending: 1})
				commit()
				b.StopTimer()
				if h, _ := src.Head(); h.Declaration.Roster.Generation != gen {
					b.Fatalf("the Source holds roster %d, want %d", h.Declaration.Roster.Generation, gen)
				}
				b.StartTimer()
			}
			b.StopTimer()
			h, _ := src.Head()
			changes, ok := src.ChangesSince(h.Seq - 1)
			if !ok || len(changes) != 1 {
				b.Fatalf("ChangesSince(%d) = %d changes, %v", h.Seq-1, len(changes), ok)
			}
			if last := changes[0]; last.Whole != (kind == "whole") || last.Roster.Len() != 1 {
				b.Fatalf("the last change: whole %v, %d names; want whole %v, 1 name", last.Whole, last.Roster.Len(), kind == "whole")
			}
		})
	}
}
