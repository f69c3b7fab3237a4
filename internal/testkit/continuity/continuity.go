// Package continuity measures whether name lookups keep succeeding through
// an event (a restart, an upgrade, a reload): probers ask at a steady rate,
// each lookup bounded by its own timeout as a container's stub resolver
// bounds it, and a window over their results counts the lookups that
// failed and the longest time between two answers.
package continuity

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"codeberg.org/miekg/dns"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
)

// Lookup asks once and returns nil when the answer is the right one.
type Lookup func(ctx context.Context) error

// Prober runs one Lookup every interval, each in its own goroutine, so a
// lookup that waits for its timeout does not hold the next one back.
type Prober struct {
	name    string
	timeout time.Duration
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// mu guards results.
	mu      sync.Mutex
	results []result
}

type result struct {
	sent, done time.Time
	err        error
}

// Start runs lookup every interval until Stop, each bounded by timeout.
func Start(name string, interval, timeout time.Duration, lookup Lookup) *Prober {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prober{name: name, timeout: timeout, cancel: cancel}
	p.wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			p.wg.Go(func() {
				sent := time.Now()
				lctx, cancel := context.WithTimeout(ctx, timeout)
				err := lookup(lctx)
				cancel()
				if err == nil && time.Since(sent) > timeout {
					err = fmt.Errorf("answered after %v, past the %v timeout", time.Since(sent).Round(time.Millisecond), timeout)
				}
				if ctx.Err() != nil && err != nil {
					return // stopped, not failed
				}
				p.mu.Lock()
				p.results = append(p.results, result{sent: sent, done: time.Now(), err: err})
				p.mu.Unlock()
			})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return p
}

// Stop ends the prober after its lookups in flight have ended.
func (p *Prober) Stop() {
	p.cancel()
	p.wg.Wait()
}

// Stats are a prober's results over a window.
type Stats struct {
	Prober     string
	Lookups    int
	Failed     int
	LongestGap time.Duration // the longest time between two answers
	Errors     []string      // the first few failures, with their time
}

// Window returns the stats of the lookups sent from from to to. Wait a
// timeout past to before asking, so that every lookup sent has ended.
func (p *Prober) Window(from, to time.Time) Stats {
	p.mu.Lock()
	rs := slices.Clone(p.results)
	p.mu.Unlock()
	st := Stats{Prober: p.name}
	var answered []time.Time
	for _, r := range rs {
		if r.sent.Before(from) || r.sent.After(to) {
			continue
		}
		st.Lookups++
		if r.err != nil {
			st.Failed++
			if len(st.Errors) < 5 {
				st.Errors = append(st.Errors, fmt.Sprintf("%s: %v", r.sent.Format("15:04:05.000"), r.err))
			}
			continue
		}
		answered = append(answered, r.done)
	}
	slices.SortFunc(answered, time.Time.Compare)
	for i := 1; i < len(answered); i++ {
		st.LongestGap = max(st.LongestGap, answered[i].Sub(answered[i-1]))
	}
	return st
}

// Sum adds up stats of several probers: lookups and failures summed, the
// longest gap of any.
func Sum(name string, sts ...Stats) Stats {
	out := Stats{Prober: name}
	for _, s := range sts {
		out.Lookups += s.Lookups
		out.Failed += s.Failed
		out.LongestGap = max(out.LongestGap, s.LongestGap)
		for _, e := range s.Errors {
			if len(out.Errors) < 5 {
				out.Errors = append(out.Errors, s.Prober+": "+e)
			}
		}
	}
	return out
}

// UDP asks server for name's A record over UDP, from a fresh socket each
// time as a stub resolver does, and wants want among the answers.
func UDP(server netip.AddrPort, name string, want netip.Addr) Lookup {
	fqdn := strings.TrimSuffix(name, ".") + "."
	return func(ctx context.Context) error {
		timeout := time.Second
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
		r, err := dnstest.Exchange(dns.NewMsg(fqdn, dns.TypeA), "udp", server.String(), timeout)
		if err != nil {
			return err
		}
		return CheckA(r, want)
	}
}

// CheckA returns nil when r answers want among its A records.
func CheckA(r *dns.Msg, want netip.Addr) error {
	if r.Rcode != dns.RcodeSuccess {
		return fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	var got []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			if a.A.Addr == want {
				return nil
			}
			got = append(got, a.A.Addr.String())
		}
	}
	return fmt.Errorf("answer %v, want %s", got, want)
}

// Table writes one line per event, in the bench scripts' format.
func Table(rows []Row) string {
	s := fmt.Sprintf("%-52s %8s %7s %15s\n", "event", "lookups", "failed", "longest gap ms")
	for _, r := range rows {
		s += fmt.Sprintf("%-52s %8d %7d %15d\n", r.Event, r.Lookups, r.Failed, r.LongestGap.Milliseconds())
	}
	return s
}

// Row is one event's line of a Table.
type Row struct {
	Event string
	Stats
}
