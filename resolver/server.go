package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshhost/meshhost/spec"
)

// Server is the mesh's DNS server. Its methods are safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	table atomic.Pointer[table]          // the roster being served; nil before the first
	allow atomic.Pointer[[]netip.Prefix] // clients answered besides loopback
	// refuseLoopback is always false outside this package's tests, which
	// set it to see REFUSED from a loopback client.
	refuseLoopback atomic.Bool
	local          atomic.Pointer[[]localRoute]     // SetLocalForward's routes
	upstream       atomic.Pointer[[]netip.AddrPort] // configured upstreams
	own            atomic.Pointer[[]netip.AddrPort] // listener addresses, for loop prevention
	socks          atomic.Pointer[[]*listener]      // the listeners, for Busy
	targets        atomic.Pointer[[]netip.AddrPort] // upstream less own and looping: what is asked
	loops          *loops                           // the upstream loop check (loop.go)
	// targetsMu serializes refreshTargets.
	targetsMu sync.Mutex

	fwd      *forwarder
	cache    *cache       // nil when disabled
	inflight atomic.Int64 // forwarded questions in flight
	// maxInflight bounds inflight: maxForwards, less in some tests.
	maxInflight atomic.Int64
	refusals    *refusals // refused clients, by network (SetNetworks)

	// compile builds a roster's table: buildTable, except in tests that
	// need a compile that fails or panics.
	compile func(r *spec.Roster, ttl, negTTL uint32, busy func() bool) (*table, error)
	// compactView compiles a view into a new table for a merge:
	// (*table).compact, except in tests that need one that fails.
	compactView func(t *table, busy func() bool) (*table, error)
	// applyDelta makes a view of a table changed by a delta: (*table).apply,
	// except in tests that need one that panics.
	applyDelta func(t *table, d *spec.RosterDelta) (*table, error)

	// updateMu serializes Update and Apply (and a merge's swap), so
	// generations are checked and swapped in order.
	updateMu sync.Mutex
	// state saves the roster served; nil without Config.StatePath.
	state *state
	// merging is set while a merge runs (one at a time).
	merging atomic.Bool
	// mergeAt is the overlay size that starts a merge: the const mergeAt,
	// except in tests.
	mergeAt int
	// localMu serializes SetLocalForward's copy-on-write.
	localMu sync.Mutex
	// rcvbufOnce logs, once, a UDP receive buffer capped below the one
	// asked for (see growRecvBuffer).
	rcvbufOnce sync.Once

	// mu guards the fields below.
	mu        sync.Mutex
	listeners map[netip.AddrPort]*listener
	closed    bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // forwards and watchers
}

// New returns a Server answering nothing yet but, when cfg.StatePath holds a
// saved roster, that roster: a restarted resolver serves the last good
// roster before the controller is reachable. Call Listen to serve.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:         cfg,
		log:         cfg.Logger.With("component", "resolver"),
		listeners:   map[netip.AddrPort]*listener{},
		compile:     buildTable,
		applyDelta:  (*table).apply,
		compactView: (*table).compact,
		mergeAt:     mergeAt,
	}
	s.maxInflight.Store(maxForwards)
	s.fwd = &forwarder{s: s, pools: map[netip.AddrPort]*upstream{}, joining: map[string]*pending{}}
	s.fwd.uses.Store(socketUses)
	s.fwd.downFor.Store(int64(downFor))
	s.SetAllow(cfg.Allow)
	s.own.Store(&[]netip.AddrPort{})
	s.local.Store(&[]localRoute{})
	if cfg.CacheSize > 0 && cfg.CacheMaxTTL > 0 {
		s.cache = newCache(cfg.CacheSize, cfg.CacheMaxTTL, cfg.CacheMaxNegativeTTL)
	}
	m, err := newMetrics(cfg.Registerer, s.cache)
	if err != nil {
		return nil, fmt.Errorf("registering resolver metrics: %w", err)
	}
	s.metrics = m
	if s.cache != nil {
		s.cache.metrics = m
	}
	s.refusals = newRefusals()
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register((*refusedCollector)(s.refusals)); err != nil {
			return nil, fmt.Errorf("registering resolver metrics: %w", err)
		}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Go(func() { s.fwd.janitor(s.ctx) })
	s.loops = newLoops()
	s.wg.Go(func() { s.loopCheck(s.ctx) })

	if cfg.StatePath != "" {
		r, saved, err := loadState(cfg.StatePath)
		switch {
		case errors.Is(err, errNoState):
		case err != nil:
			s.cancel()
			return nil, err
		default:
			if saved.broken != nil {
				s.log.Warn("the saved roster's log could not all be read; serving what it held up to the fault, and saving the roster whole at the next change", "err", saved.broken)
			}
			var t *table
			err := s.safely(r.Generation, "compiling the saved", func() (err error) {
				t, err = s.compile(r, seconds(cfg.TTL), seconds(cfg.NegativeTTL), nil) // nothing listens yet
				return err
			})
			if err != nil {
				s.cancel()
				return nil, fmt.Errorf("compiling saved roster %q: %w", cfg.StatePath, err)
			}
			s.table.Store(t)
			s.metrics.generation.Set(float64(t.gen))
			s.log.Info("serving saved roster", "path", cfg.StatePath, "roster_generation", t.gen, "names", len(r.Names))
		}
		st, err := openState(cfg.StatePath, saved, cfg.stateFaults)
		if err != nil {
			s.cancel()
			return nil, err
		}
		s.state = st
		s.wg.Go(func() { s.retrySaves(s.ctx) })
	}

	if len(cfg.Upstreams) > 0 {
		s.setUpstreams(cfg.Upstreams)
	} else if err := s.watchResolvConf(); err != nil {
		s.cancel()
		return nil, err
	}
	return s, nil
}

// Roster returns the roster being served, nil before the first. It is
// rebuilt from the compiled table, so the caller owns it.
func (s *Server) Roster() *spec.Roster {
	t := s.table.Load()
	if t == nil {
		return nil
	}
	return t.roster(nil)
}

// RosterContext is Roster, as a resolver behind a socket answers it
// (control.Client.RosterContext): in this process it never fails.
func (s *Server) RosterContext(context.Context) (*spec.Roster, error) { return s.Roster(), nil }

// SetAllow replaces the client networks answered besides loopback.
func (s *Server) SetAllow(p []netip.Prefix) {
	c := make([]netip.Prefix, 0, len(p))
	for _, x := range p {
		if x.IsValid() {
			c = append(c, x.Masked())
		}
	}
	s.allow.Store(&c)
}

func (s *Server) allowed(client netip.Addr) bool {
	client = client.Unmap()
	if client.IsLoopback() && !s.refuseLoopback.Load() {
		return true
	}
	for _, p := range *s.allow.Load() {
		if p.Contains(client) {
			return true
		}
	}
	return false
}

// FreezeState stops every write of the saved roster (a delta, a
// compaction), waiting for one under way: on a handover the successor owns
// the state directory once this returns. ThawState undoes it.
func (s *Server) FreezeState() {
	if s.state != nil {
		s.state.store.Freeze()
	}
}

// ThawState lets the saved roster be written again after FreezeState (a
// handover that failed).
func (s *Server) ThawState() {
	if s.state != nil {
		s.state.store.Thaw()
	}
}

// Close stops every listener and forward and waits for them.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ls := make([]*listener, 0, len(s.listeners))
	for _, l := range s.listeners {
		ls = append(ls, l)
	}
	s.listeners = map[netip.AddrPort]*listener{}
	s.mu.Unlock()
	s.cancel()
	var errs []error
	for _, l := range ls {
		errs = append(errs, l.close())
	}
	s.fwd.close()
	s.wg.Wait()
	if s.state != nil {
		errs = append(errs, s.state.store.Close())
	}
	return errors.Join(errs...)
}

// Listeners returns the addresses being served, in order.
func (s *Server) Listeners() []netip.AddrPort {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.AddrPort, 0, len(s.listeners))
	for a := range s.listeners {
		out = append(out, a)
	}
	slices.SortFunc(out, netip.AddrPort.Compare)
	return out
}

// FlushCache empties the cache of outside names (the roster's names are
// never in it). The next question for each name goes upstream again.
func (s *Server) FlushCache() {
	if s.cache != nil {
		s.cache.flush()
		s.log.Info("cache flushed")
	}
}

// Serving reports whether a roster is being served (Update succeeded once,
// or New loaded a saved one). It is cheaper than Roster.
func (s *Server) Serving() bool { return s.table.Load() != nil }
