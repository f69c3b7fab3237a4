package natssource

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// DefaultPatience is how long a watcher may be cut off from the server
// before it reports itself unhealthy.
const DefaultPatience = 30 * time.Second

// Sink takes the machine's whole declaration, roster included, whenever
// either changes; *declsource.Source.
type Sink interface {
	Put(d *spec.Declaration, origin string) error
}

// DeltaSink is a Sink that also takes a roster change alone, as a delta
// from the roster it holds, at the cost of the change rather than of the
// roster; *declsource.Source. PutRosterDelta refuses a delta that does
// not apply to the roster it holds, or to the declaration generation it
// holds, with an error matching spec.ErrDeltaBase: the watcher then puts
// the whole declaration. It owns d once called.
type DeltaSink interface {
	Sink
	PutRosterDelta(machine string, declGen uint64, d *spec.RosterDelta, origin string) error
}

// Snapshot is a roster in force, with where it was committed. Its Names
// are shared with the watcher and with other snapshots: never modify them.
type Snapshot struct {
	Generation     uint64
	Revision       uint64 // the commit's Revision
	CommitRevision uint64 // where the commit record is in the bucket
	Zones          []string
	Names          map[string][]netip.Addr
	digest         digest
}

// Roster returns the snapshot as a spec.Roster (sharing its names).
func (s *Snapshot) Roster() *spec.Roster {
	return &spec.Roster{Generation: s.Generation, Zones: s.Zones, Names: s.Names}
}

// Config is what a Watcher runs with. Server is required.
type Config struct {
	Server Server
	// Layout names the buckets; zero: LayoutFor(DefaultPrefix).
	Layout Layout
	// Machine is the machine whose declaration is read from the machines
	// bucket; "" reads the roster only.
	Machine string
	// Sink, when set, receives the declaration with the roster in force
	// each time either changes (once both are known). A DeltaSink that
	// took the roster a commit changes receives that change alone.
	Sink Sink
	// OnChange, when set, is called with each applied roster change, in
	// order, from the watcher's goroutine. It must not block for long.
	OnChange func(*Change)
	// Seed, when set, is the roster in force at the start (a snapshot
	// from another watcher of the same bucket): reading resumes after its
	// revision instead of reading the whole bucket.
	Seed *Snapshot
	// Patience is how long the watcher may be cut off before Health
	// reports it; DefaultPatience when zero.
	Patience time.Duration
	Logger   *slog.Logger
	// Registerer receives the watcher's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Watcher follows the buckets: it applies each roster commit whole, in
// order, and keeps the roster in force while the server is unreachable.
type Watcher struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	kick    chan struct{} // a reconnect: resume the watch now
	health  atomic.Pointer[healthState]
	// refusals is the current streak of refused commits (see Health).
	refusals refusalStreak
	// everLive is set once a watch was first established: a connect
	// callback after that is not news.
	everLive atomic.Bool
	origin   string

	// mu guards the fields below. The Run goroutine alone changes them.
	mu         sync.Mutex
	roster     *rosterState
	decl       *spec.Declaration // the machine's, without roster
	declRev    uint64
	streams    map[string]time.Time // bucket -> its stream's creation time
	resyncedAt uint64               // the commit revision a resync was last tried for
	// suspect is a commit record that did not add up before the watch
	// was known to be caught up (a value it covers may have been
	// superseded since); the stall check settles it.
	suspect        *CommitError
	refusedLogged  string
	lastProblemLog string
	// delivered is what the sink last took: a roster change from its
	// roster generation, with its declaration generation, is a delta.
	delivered delivery
	// server is the server the watch reads from (name, URL redacted).
	server [2]string
}

// delivery is a declaration the sink took; zero when none (or refused).
type delivery struct {
	declGen, rosterGen uint64
}

// healthState is the watch's liveness: down is zero while it is live.
type healthState struct {
	down time.Time
	err  error
}

// NewWatcher returns a Watcher; Run starts it.
func NewWatcher(cfg Config) (*Watcher, error) {
	if err := cfg.Server.check(); err != nil {
		return nil, err
	}
	if cfg.Layout == (Layout{}) {
		cfg.Layout = LayoutFor(DefaultPrefix)
	}
	if err := cfg.Layout.validate(); err != nil {
		return nil, err
	}
	if cfg.Patience <= 0 {
		cfg.Patience = DefaultPatience
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		cfg: cfg, log: cfg.Logger.With("component", "natssource"), metrics: m,
		kick: make(chan struct{}, 1), roster: newRosterState(), streams: map[string]time.Time{},
		origin: "nats " + cfg.Layout.Roster,
	}
	if cfg.Seed != nil {
		w.roster.seed(cfg.Seed)
		m.rosterApplied(cfg.Seed.Generation, cfg.Seed.Revision)
	}
	w.health.Store(&healthState{down: time.Now(), err: errors.New("not connected yet")})
	m.health = w.unreachableFor
	m.refused = w.refusedFor
	return w, nil
}

// Snapshot returns the roster in force, nil before the first commit.
func (w *Watcher) Snapshot() *Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.roster.snapshot()
}

// Generation returns the roster generation in force (0: none yet).
func (w *Watcher) Generation() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.roster.gen
}

// Health reports the watcher cut off from the server for longer than its
// patience, or its commits (roster or declaration) refused for longer than
// that, or nil. It never waits on the watch.
func (w *Watcher) Health() error {
	h := w.health.Load()
	if h.down.IsZero() {
		return w.refusedHealth()
	}
	if d := time.Since(h.down); d > w.cfg.Patience {
		return fmt.Errorf("the roster source %s has been unreachable for %s (patience %s): %v; the roster in force stays",
			w.cfg.Server.Redacted(), d.Round(time.Second), w.cfg.Patience, h.err)
	}
	return w.refusedHealth()
}

// unreachableFor is how long the watch has not been live (0 while it is).
func (w *Watcher) unreachableFor() time.Duration {
	h := w.health.Load()
	if h.down.IsZero() {
		return 0
	}
	return time.Since(h.down)
}

func (w *Watcher) setLive() {
	w.everLive.Store(true)
	w.mu.Lock()
	w.lastProblemLog = ""
	w.mu.Unlock()
	if !w.health.Load().down.IsZero() {
		w.health.Store(&healthState{})
		w.log.Info("watching the roster source", "url", w.cfg.Server.Redacted(), "roster_bucket", w.cfg.Layout.Roster)
	}
	w.metrics.connected.Set(1)
}

// Server returns the name and URL (without credentials) of the server
// the watch reads from, or last read from; empty before the first watch.
func (w *Watcher) Server() (name, url string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.server[0], w.server[1]
}

// setServer records the server a live watch reads from.
func (w *Watcher) setServer(nc *nats.Conn) {
	cur := [2]string{nc.ConnectedServerName(), RedactURL(nc.ConnectedUrlRedacted())}
	w.mu.Lock()
	prev := w.server
	w.server = cur
	w.mu.Unlock()
	if prev != cur && prev != ([2]string{}) {
		w.metrics.server.DeleteLabelValues(prev[0], prev[1])
	}
	w.metrics.server.WithLabelValues(cur[0], cur[1]).Set(1)
}

func (w *Watcher) setDown(err error) {
	if h := w.health.Load(); h.down.IsZero() {
		w.health.Store(&healthState{down: time.Now(), err: err})
	} else {
		w.health.Store(&healthState{down: h.down, err: err})
	}
	w.metrics.connected.Set(0)
	w.mu.Lock()
	cur := w.server
	w.mu.Unlock()
	if cur != ([2]string{}) {
		w.metrics.server.WithLabelValues(cur[0], cur[1]).Set(0)
	}
}

func (w *Watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

var (
	errUnreachable = errors.New("the NATS server is unreachable")
	errReconnected = errors.New("reconnected to the NATS server")
	errResync      = errors.New("reading the roster bucket whole again")
	errPanicked    = errors.New("the roster watch panicked")
)

// Run watches until ctx ends. Every interruption (a lost connection, a
// closed watch, a stall) resumes reading after the last revision read,
// and the roster in force stays meanwhile. A panic while watching (in the
// watcher, its Sink or OnChange) is recovered (see safeSession): Run goes
// on.
func (w *Watcher) Run(ctx context.Context) error {
	opts := watchOptions(w.cfg.Patience)
	if w.cfg.Machine != "" {
		// Answers and deliveries to this machine's inbox alone, which its
		// credentials may read (see Permissions).
		opts = append(opts, nats.CustomInboxPrefix(InboxPrefix(w.cfg.Machine)))
	}
	nc, err := w.cfg.Server.Connect(append(opts,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				err = errUnreachable
			}
			w.setDown(fmt.Errorf("disconnected: %w", err))
		}),
		nats.ReconnectHandler(func(*nats.Conn) { w.poke() }),
		// The client's asynchronous errors (a slow consumer, a permission
		// refused) are the watcher's log lines: its default handler
		// wrote them to stderr as plain text, past the JSON logger.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			w.log.Warn("NATS client error", "subject", subject, "err", err)
		}),
		// A first connect that was retried (the server was down at the
		// start) opens the watch at once, not after the backoff.
		nats.ConnectHandler(func(*nats.Conn) {
			if !w.everLive.Load() {
				w.poke()
			}
		}),
	)...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	backoff := 100 * time.Millisecond
	for {
		start := time.Now()
		err := w.safeSession(ctx, nc, js)
		if ctx.Err() != nil {
			return nil
		}
		again := errors.Is(err, errReconnected) || errors.Is(err, errResync) || errors.Is(err, errPanicked)
		if !again {
			w.setDown(err)
		}
		w.mu.Lock()
		from := w.roster.lastRev
		switch {
		case again:
			w.log.Info("opening the roster watch again", "why", err, "after_revision", from)
		case err.Error() != w.lastProblemLog:
			w.lastProblemLog = err.Error()
			w.log.Warn("roster watch interrupted; the roster in force stays, and reading resumes after the last revision read",
				"err", err, "revision", from, "roster_generation", w.roster.gen)
		}
		w.mu.Unlock()
		if time.Since(start) > w.cfg.Patience {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
		case <-time.After(backoff):
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// safeSession is session, recovering a panic on the watch's goroutine
// (in the watcher, its Sink or OnChange, from Run's own goroutine): the
// agent's process would end with it, its resolver too when in-process.
// The panic is logged with its stack and counted
// (meshhost_natssource_panics_total). What it may have left half done is
// not trusted: both buckets are read whole again, the roster in force is
// rebuilt from the roster bucket (rosterState.distrust) and handed to the
// sink whole, with the declaration. Meanwhile the roster in force stays,
// and so does the sink's.
func (w *Watcher) safeSession(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (err error) {
	defer func() {
		if v := recover(); v != nil {
			p := &panicError{in: "the roster watch", v: v, stack: debug.Stack()}
			w.recovered(p)
			err = p
		}
	}()
	return w.session(ctx, nc, js)
}

// panicError is a panic recovered in the watch, as its session's end.
type panicError struct {
	in    string // where
	v     any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("%s panicked: %v", p.in, p.v) }
func (p *panicError) Unwrap() error { return errPanicked }

// recovered logs and counts a panic, and makes the watch read everything
// again without trusting what it holds (see safeSession), from Run's
// goroutine. w.mu must not be held: no section holding it can panic half
// way and leave it locked (they unlock in a defer, or only read fields).
func (w *Watcher) recovered(p *panicError) {
	w.metrics.panics.Inc()
	w.log.Error(p.in+" panicked; the roster in force stays, and the buckets are read whole again", "panic", p.v, "stack", string(p.stack))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.roster.distrust()
	w.declRev = 0
	w.suspect = nil
	w.delivered = delivery{} // the sink gets the next roster whole
}

// session opens the watches and follows them until one must be opened
// again; it returns why.
func (w *Watcher) session(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) error {
	if !nc.IsConnected() {
		return errUnreachable
	}
	// A reconnect signalled before this session began is this session.
	select {
	case <-w.kick:
	default:
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rkv, err := w.bucket(sctx, js, w.cfg.Layout.Roster)
	if err != nil {
		return err
	}
	if err := w.checkCommit(sctx, rkv); err != nil {
		return err
	}
	w.mu.Lock()
	from := w.roster.lastRev
	w.mu.Unlock()
	if from > 0 {
		w.metrics.resumes.Inc()
		w.log.Debug("resuming the roster watch", "after", from)
	}
	rf, err := follow(nc, w.cfg.Layout.Roster, "", from)
	if err != nil {
		return err
	}
	defer rf.stop()

	var mentries <-chan entry
	var mfailed <-chan *panicError
	if w.cfg.Machine != "" {
		if _, err = w.bucket(sctx, js, w.cfg.Layout.Machines); err != nil {
			return err
		}
		w.mu.Lock()
		mfrom := w.declRev
		w.mu.Unlock()
		mf, err := follow(nc, w.cfg.Layout.Machines, w.cfg.Machine, mfrom)
		if err != nil {
			return err
		}
		defer mf.stop()
		mentries, mfailed = mf.entries(), mf.failed()
	}
	w.setLive()
	w.setServer(nc)

	tick := time.NewTicker(max(w.cfg.Patience/2, time.Second))
	defer tick.Stop()
	// The pending count says when the watch is caught up, but it counts
	// messages the bucket's history limit removes before they are
	// delivered, so it may never reach 0: a pause in the entries
	// evaluates too.
	idle := time.NewTimer(time.Hour)
	idle.Stop()
	defer idle.Stop()
	progress := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.kick:
			return errReconnected
		case e := <-rf.entries():
			progress = true
			w.observe(e)
			w.metrics.behind.Set(float64(e.pending))
			if e.pending == 0 {
				idle.Stop()
				if w.evaluate(true) {
					return errResync
				}
			} else {
				idle.Reset(20 * time.Millisecond)
			}
		case <-idle.C:
			w.evaluate(false)
		case e := <-mentries:
			w.observeDeclaration(e)
		case p := <-rf.failed():
			w.recovered(p)
			return p
		case p := <-mfailed:
			w.recovered(p)
			return p
		case <-tick.C:
			// A watch that fell silent while the bucket moved on (a lost
			// consumer nats.go did not notice) is opened again.
			if !rf.valid() {
				return fmt.Errorf("the watch of bucket %s ended", w.cfg.Layout.Roster)
			}
			if err := w.stalled(sctx, rkv, progress); err != nil {
				return err
			}
			progress = false
		}
	}
}

// bucket opens a bucket and notices a bucket recreated, or rewound below
// what was read, since the last session: the roster bucket is then read
// whole again.
func (w *Watcher) bucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	tctx, cancel := context.WithTimeout(ctx, max(w.cfg.Patience/2, 2*time.Second))
	defer cancel()
	kv, err := js.KeyValue(tctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("bucket %s does not exist: no controller has published to it yet", name)
	}
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", name, err)
	}
	st, err := kv.Status(tctx)
	if err != nil {
		return nil, fmt.Errorf("reading the status of bucket %s: %w", name, err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	w.mu.Lock()
	defer w.mu.Unlock()
	prev, seen := w.streams[name]
	w.streams[name] = info.Created
	var read uint64
	if name == w.cfg.Layout.Roster {
		read = w.roster.lastRev
	} else {
		read = w.declRev
	}
	if (seen && !prev.Equal(info.Created)) || info.State.LastSeq < read {
		w.log.Warn("bucket recreated or rewound; reading it whole again (what is in force stays until a newer generation is committed)",
			"bucket", name, "read_up_to", read, "bucket_last", info.State.LastSeq)
		if name == w.cfg.Layout.Roster {
			w.roster.reset()
			w.metrics.resyncs.Inc()
		} else {
			w.declRev = 0
		}
	}
	return kv, nil
}

// checkCommit reads the commit record before a watch resumes. A record
// at or below the last revision read that is not the newest one read
// means the bucket's history is not the one read: a server that lost
// acknowledged writes (killed before they reached its disk) and reused
// their revisions for new ones. The bucket is then read whole again.
func (w *Watcher) checkCommit(ctx context.Context, kv jetstream.KeyValue) error {
	w.mu.Lock()
	read, seen := w.roster.lastRev, w.roster.lastCommit
	w.mu.Unlock()
	if read == 0 {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, max(w.cfg.Patience/2, 2*time.Second))
	defer cancel()
	e, err := kv.Get(tctx, CommitKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the commit record of bucket %s: %w", w.cfg.Layout.Roster, err)
	}
	if e.Revision() <= read && e.Revision() != seen {
		w.mu.Lock()
		w.roster.reset()
		w.mu.Unlock()
		w.metrics.resyncs.Inc()
		w.log.Warn("the roster bucket's history differs from what was read (a server that lost writes?); reading it whole again",
			"commit_revision", e.Revision(), "read_up_to", read, "last_commit_read", seen)
	}
	return nil
}

// stalled reports a watch that read nothing since the last tick while the
// bucket holds revisions it has not read.
func (w *Watcher) stalled(ctx context.Context, kv jetstream.KeyValue, progress bool) error {
	if progress {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, max(w.cfg.Patience/2, 2*time.Second))
	defer cancel()
	st, err := kv.Status(tctx)
	if err != nil {
		return fmt.Errorf("checking bucket %s: %w", w.cfg.Layout.Roster, err)
	}
	last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	w.mu.Lock()
	read := w.roster.lastRev
	suspect := w.suspect
	w.suspect = nil
	w.mu.Unlock()
	if last >= read {
		w.metrics.behind.Set(float64(last - read))
	}
	if last != read {
		return fmt.Errorf("the watch of bucket %s stalled at revision %d; the bucket is at %d", w.cfg.Layout.Roster, read, last)
	}
	if suspect != nil && w.settle(suspect) {
		return errResync
	}
	return nil
}

func (w *Watcher) observe(e entry) {
	if err := w.observeEntry(e); err != nil {
		w.refused(err)
	}
}

// observeEntry feeds e to the roster state, under w.mu.
func (w *Watcher) observeEntry(e entry) error {
	w.mu.Lock()
	defer w.mu.Unlock() // also when it panics: see recovered
	return w.roster.observe(e.key, e.rev, e.deleted, e.value)
}

// evaluate puts the newest commit read in force if it adds up, and hands
// the result on. caughtUp says the watch has read everything the bucket
// holds. A commit that does not add up then is tried once more against
// the whole bucket read again: what was read may lack a value the bucket
// no longer holds (superseded under its history limit before this watch
// read it). One that does not add up before that is left to the stall
// check, since a newer commit usually follows.
func (w *Watcher) evaluate(caughtUp bool) (resync bool) {
	next, ch, decl, settle, err := w.evaluateNext(caughtUp)
	if settle != nil {
		return w.settle(settle)
	}
	if err != nil {
		if next != nil {
			w.refused(err)
		}
		return false
	}
	if ch == nil {
		return false
	}
	if ch.Generation == ch.Previous {
		// The record in force, rebuilt from the bucket after a panic
		// (see safeSession): in force as the bucket has it, and to the
		// sink whole, which may not have taken it. Not a change of
		// generation: OnChange is not told.
		w.log.Info("roster generation in force read whole again", "roster_generation", ch.Generation, "names", ch.Names, "revision", ch.Revision)
		w.deliver(decl, w.Snapshot())
		return false
	}
	w.metrics.commits.WithLabelValues("applied").Inc()
	w.refusals.clear("roster")
	w.metrics.rosterApplied(ch.Generation, ch.Revision)
	w.log.Info("roster generation in force", "roster_generation", ch.Generation, "previous", ch.Previous, "set", len(ch.Set), "removed", len(ch.Removed), "names", ch.Names, "revision", ch.Revision, "full_read", ch.Full)
	if w.cfg.OnChange != nil {
		w.cfg.OnChange(ch)
	}
	w.deliverChange(decl, ch)
	return false
}

// evaluateNext evaluates the newest commit record read, under w.mu: the
// record (nil: none), the change applied (nil: none) with the declaration
// to hand on with it, or a record that did not add up once caught up, to
// settle; or why nothing was applied.
func (w *Watcher) evaluateNext(caughtUp bool) (next *seenCommit, ch *Change, decl *spec.Declaration, settle *CommitError, err error) {
	w.mu.Lock()
	defer w.mu.Unlock() // also when it panics: see recovered
	next = w.roster.next
	ch, err = w.roster.evaluate()
	var ce *CommitError
	if errors.As(err, &ce) && ce.Reason == reasonInconsistent {
		if !caughtUp {
			w.suspect = ce // for the stall check
			return next, nil, nil, nil, nil
		}
		return next, nil, nil, ce, nil
	}
	if ch != nil {
		w.suspect = nil
		w.refusedLogged = ""
		decl = w.decl
	}
	return next, ch, decl, nil, err
}

// deliverChange hands an applied roster change to the sink: as a delta
// when the sink took the roster it changes with this declaration (what
// it costs is the change), else with the whole declaration (as deliver).
func (w *Watcher) deliverChange(decl *spec.Declaration, ch *Change) {
	if w.cfg.Sink == nil || decl == nil {
		return
	}
	ds, ok := w.cfg.Sink.(DeltaSink)
	w.mu.Lock()
	last := w.delivered
	w.mu.Unlock()
	if ok && last == (delivery{decl.Generation, ch.Previous}) && ch.Previous != 0 {
		err := ds.PutRosterDelta(decl.Machine, decl.Generation, deltaOf(ch), w.origin)
		if err == nil {
			w.setDelivered(delivery{decl.Generation, ch.Generation})
			return
		}
		if !errors.Is(err, spec.ErrDeltaBase) {
			w.setDelivered(delivery{})
			w.log.Warn("roster change not taken", "declaration_generation", decl.Generation, "roster_generation", ch.Generation, "err", err)
			return
		}
		// The sink's roster moved by another way: put whole.
		w.log.Debug("roster change put whole", "declaration_generation", decl.Generation, "roster_generation", ch.Generation, "why", err)
	}
	// The roster in force is ch's: only this goroutine changes it.
	w.deliver(decl, w.Snapshot())
}

// deltaOf is ch as a roster delta, sharing its names and addresses
// (neither is ever changed once applied).
func deltaOf(ch *Change) *spec.RosterDelta {
	d := &spec.RosterDelta{From: ch.Previous, To: ch.Generation, Set: ch.Set, Remove: ch.Removed}
	if ch.ZonesChanged {
		d.Zones = ch.Zones
		if d.Zones == nil {
			d.Zones = []string{}
		}
	}
	return d
}

func (w *Watcher) setDelivered(d delivery) {
	w.mu.Lock()
	w.delivered = d
	w.mu.Unlock()
}

// settle decides on a commit that did not add up once the watch was
// caught up: the first time (per record), the bucket is read whole again
// (true); after a whole read it is refused.
func (w *Watcher) settle(ce *CommitError) bool {
	w.mu.Lock()
	if !w.roster.full && w.resyncedAt != ce.Revision {
		w.resyncedAt = ce.Revision
		w.roster.reset()
		w.mu.Unlock()
		w.metrics.resyncs.Inc()
		w.log.Warn("roster commit does not add up to what was read; reading the bucket whole again", "err", ce)
		return true
	}
	w.mu.Unlock()
	w.refused(ce)
	return false
}

// refused counts and logs a refused commit (once per distinct refusal).
func (w *Watcher) refused(err error) {
	reason := reasonInvalid
	var offered uint64
	var ce *CommitError
	if errors.As(err, &ce) {
		reason, offered = ce.Reason, ce.Generation
	}
	w.metrics.commits.WithLabelValues(reason).Inc()
	w.mu.Lock()
	again := w.refusedLogged == err.Error()
	w.refusedLogged = err.Error()
	gen := w.roster.gen
	w.mu.Unlock()
	w.refusals.refuse("roster", reason, err.Error(), offered, gen)
	if !again {
		w.log.Error("roster commit refused; the roster in force stays", "err", err, "in_force", gen)
	}
}

func (w *Watcher) observeDeclaration(e entry) {
	w.mu.Lock()
	if e.rev <= w.declRev {
		w.mu.Unlock()
		return
	}
	w.declRev = e.rev
	cur := w.decl
	w.mu.Unlock()
	if e.deleted {
		w.metrics.declarations.WithLabelValues("invalid").Inc()
		w.log.Error("the machine's declaration was deleted from the bucket; the declaration in force stays (publish one with no containers to empty the machine)", "machine", w.cfg.Machine)
		return
	}
	d, err := parseMachineDeclaration(e.value)
	if err == nil && d.Machine != w.cfg.Machine {
		err = &spec.FieldError{Path: "machine", Reason: fmt.Sprintf("%q is another machine; this agent runs %q", d.Machine, w.cfg.Machine)}
	}
	if err == nil {
		// Judged as the Source judges it (admit.Contents): a restarted
		// watcher's Put refuses what this one refuses.
		switch dec := admit.Contents(d, cur); {
		case dec.Verdict == admit.Same:
			return // the same again
		case dec.Reason == admit.GenerationReused:
			w.metrics.declarations.WithLabelValues("stale").Inc()
			w.refusals.refuse("declaration", reasonStale, "the generation in force with other content (generation_reused)", d.Generation, cur.Generation)
			w.log.Error("declaration refused: generation in force with other content; a changed declaration needs a newer generation (generation_reused); the one in force stays", "declaration_generation", d.Generation, "refusal", dec.Reason)
			return
		case dec.Verdict == admit.Refused:
			w.metrics.declarations.WithLabelValues("stale").Inc()
			w.refusals.refuse("declaration", reasonStale, "generations never go backwards", d.Generation, cur.Generation)
			w.log.Error("declaration refused: generations never go backwards; the one in force stays", "declaration_generation", d.Generation, "in_force", cur.Generation, "refusal", dec.Reason)
			return
		}
	}
	if err != nil {
		w.metrics.declarations.WithLabelValues("invalid").Inc()
		w.refusals.refuse("declaration", reasonInvalid, err.Error(), declGen(d), declGen(cur))
		w.log.Error("declaration refused; the one in force stays", "revision", e.rev, "err", err)
		return
	}
	w.metrics.declarations.WithLabelValues("applied").Inc()
	w.refusals.clear("declaration")
	w.metrics.declaration.Set(float64(d.Generation))
	var sn *Snapshot
	func() {
		w.mu.Lock()
		defer w.mu.Unlock() // also when it panics: see recovered
		w.decl = d
		if w.cfg.Sink != nil {
			sn = w.roster.snapshot()
		}
	}()
	w.log.Info("declaration read", "machine", d.Machine, "declaration_generation", d.Generation, "containers", len(d.Containers))
	if sn == nil && w.cfg.Sink != nil {
		w.log.Warn("the declaration waits for a roster commit", "bucket", w.cfg.Layout.Roster)
	}
	w.deliver(d, sn)
}

// deliver hands the declaration with the roster in force to the sink,
// once both are known.
func (w *Watcher) deliver(decl *spec.Declaration, sn *Snapshot) {
	if w.cfg.Sink == nil || decl == nil || sn == nil {
		return
	}
	d := *decl
	d.Roster = sn.Roster()
	if err := w.cfg.Sink.Put(&d, w.origin); err != nil {
		w.setDelivered(delivery{})
		w.log.Warn("declaration not taken", "declaration_generation", d.Generation, "roster_generation", sn.Generation, "err", err)
		return
	}
	w.setDelivered(delivery{d.Generation, sn.Generation})
}

// parseMachineDeclaration reads a machine's declaration as the machines
// bucket holds it: the declaration format without the roster member.
func parseMachineDeclaration(data []byte) (*spec.Declaration, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, &spec.FieldError{Reason: "not a JSON object: " + err.Error()}
	}
	if _, ok := top["roster"]; ok {
		return nil, &spec.FieldError{Path: "roster", Reason: "the roster travels in the roster bucket; a declaration in the machines bucket carries none"}
	}
	// The strict reader reads it, with an empty roster in place.
	i := bytes.IndexByte(data, '{')
	placeholder := `"roster":{"generation":1,"names":{}}`
	if len(top) > 0 {
		placeholder += ","
	}
	doc := make([]byte, 0, len(data)+len(placeholder))
	doc = append(append(append(doc, data[:i+1]...), placeholder...), data[i+1:]...)
	d, err := specjson.ParseDeclaration(doc)
	if err != nil {
		return nil, err
	}
	d.Roster = nil
	return d, nil
}
