package natssource

import (
	"fmt"
	"sync"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// refusalStreak is the watch's run of refused commits: a roster commit
// or a machine declaration the bucket holds but the agent does not put
// in force. The roster (or declaration) in force stays meanwhile, frozen;
// past the patience Health says so, with the refusal, so that /readyz
// fails rather than report a machine healthy that no longer follows its
// source. A commit of the same kind put in force ends the streak.
type refusalStreak struct {
	mu    sync.Mutex
	kinds map[string]refusal // "roster", "declaration"
}

// refusal is the current streak of one kind: since is its first refusal,
// the rest the latest one.
type refusal struct {
	since          time.Time
	reason, detail string
	gen, inForce   uint64
}

// refuse records a refused commit of kind: its reason, what it said, and
// the generations offered and in force.
func (s *refusalStreak) refuse(kind, reason, detail string, gen, inForce uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kinds == nil {
		s.kinds = map[string]refusal{}
	}
	since := time.Now()
	if r, ok := s.kinds[kind]; ok {
		since = r.since
	}
	s.kinds[kind] = refusal{since: since, reason: reason, detail: detail, gen: gen, inForce: inForce}
}

// clear ends kind's streak: a commit of that kind is in force.
func (s *refusalStreak) clear(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.kinds, kind)
}

// oldest returns the kind refused the longest, and since when (zero:
// none refused).
func (s *refusalStreak) oldest() (kind string, r refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.kinds {
		if kind == "" || v.since.Before(r.since) || (v.since.Equal(r.since) && k < kind) {
			kind, r = k, v
		}
	}
	return kind, r
}

// refusedFor is how long commits have been refused without one put in
// force (0: none refused).
func (w *Watcher) refusedFor() time.Duration {
	_, r := w.refusals.oldest()
	if r.since.IsZero() {
		return 0
	}
	return time.Since(r.since)
}

// refusedHealth reports commits refused for longer than the patience, or nil.
func (w *Watcher) refusedHealth() error {
	kind, r := w.refusals.oldest()
	if r.since.IsZero() {
		return nil
	}
	d := time.Since(r.since)
	if d <= w.cfg.Patience {
		return nil
	}
	return fmt.Errorf("%s commits from %s have been refused for %s (patience %s), the latest %s, generation %d (%s in force): %s; the %s in force stays, frozen: publish a valid %s with a newer generation",
		kind, w.cfg.Server.URL, d.Round(time.Second), w.cfg.Patience, r.reason, r.gen, fmtGen(r.inForce), r.detail, kind, kind)
}

func fmtGen(g uint64) string {
	if g == 0 {
		return "none"
	}
	return fmt.Sprintf("%d", g)
}

// declGen is d's generation, 0 when there is none.
func declGen(d *spec.Declaration) uint64 {
	if d == nil {
		return 0
	}
	return d.Generation
}
