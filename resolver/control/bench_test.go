package control

import (
	"fmt"
	"maps"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// BenchmarkRosterChange100k times a roster change of one name at 100,000
// names through the control socket, as the agent makes it of
// meshhost-resolver: "delta" is Client.Apply (PATCH /v1/roster: the
// resolver reads, validates, swaps in and saves the one name), "whole" is
// what the agent did before (its roster copied and changed, then
// Client.Update: the whole roster marshalled, PUT, parsed and diffed).
// Client and resolver share the process, so B/op, allocs/op and cpu-µs/op
// (the process's CPU time, every goroutine, the resolver's background
// merges and compactions included) are both sides' together; ns/op is a
// change from the request to the reply, saved; req-B/op is the size of
// the request's body.
func BenchmarkRosterChange100k(b *testing.B) {
	for _, kind := range []string{"delta", "whole"} {
		b.Run(kind, func(b *testing.B) {
			dir := b.TempDir()
			srv := newResolver(b, dir)
			_, c := serve(b, dir, srv, Config{})
			inForce := bigRoster(1, 100000).Normalize()
			if err := c.Update(inForce); err != nil {
				b.Fatal(err)
			}
			gen := uint64(1)
			one := &spec.RosterDelta{From: 1, To: 2, Set: map[string][]netip.Addr{"moved2.internal": {netip.MustParseAddr("10.200.0.2")}}}
			body, _ := one.MarshalJSON()
			if kind == "whole" {
				body, _ = inForce.MarshalJSON()
			}
			b.ReportAllocs()
			cpu := cpuTime(b)
			for b.Loop() {
				gen++
				d := &spec.RosterDelta{From: gen - 1, To: gen, Set: map[string][]netip.Addr{
					fmt.Sprintf("moved%d.internal", gen): {netip.AddrFrom4([4]byte{10, 200, byte(gen >> 8), byte(gen)})},
				}}
				var err error
				if kind == "delta" {
					err = c.Apply(d)
				} else {
					next := &spec.Roster{Generation: inForce.Generation, Zones: inForce.Zones, Names: make(map[string][]netip.Addr, len(inForce.Names))}
					maps.Copy(next.Names, inForce.Names)
					if _, err = next.Apply(d); err == nil {
						err = c.Update(next)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				inForce.Apply(d)
			}
			quiesce(b)
			b.ReportMetric(float64((cpuTime(b)-cpu).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(len(body)), "req-B/op")
			if g := srv.Generation(); g != gen {
				b.Fatalf("the resolver serves %d, want %d", g, gen)
			}
		})
	}
}

// cpuTime is the CPU time the process has used, user and system, every
// goroutine included.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quiesce waits (at most 10 s) until the process uses less than 2 ms of
// CPU in 50 ms, so that cpu-µs/op includes the background work (merges,
// compactions) the changes caused.
func quiesce(tb testing.TB) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c := cpuTime(tb)
		time.Sleep(50 * time.Millisecond)
		if cpuTime(tb)-c < 2*time.Millisecond {
			return
		}
	}
}
