package resolver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"math"
	mrand "math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Forwarding. A question that is not the mesh's goes to the upstreams in
// turn, healthy ones first (upstreams.go), until one gives a useful answer;
// SERVFAIL comes only when every one failed.
//
// Each upstream has a few long-lived UDP sockets, each connected to it, so
// the kernel delivers a socket only datagrams from that server's address and
// port. Each socket is bound by the kernel to a random ephemeral port and is
// retired after socketUses queries or socketAge, whichever comes first, for
// a fresh one on a new random port: an off-path attacker has to guess the
// port among the live ones and a random 16-bit ID, and a socket's port is
// not open for long. A reply is taken only when its ID belongs to a query in
// flight on that socket and it repeats that query's question; anything else
// (a late reply, a spoof) is dropped and the query keeps waiting.
// Identical questions in flight together go upstream once (join), however
// many they are, each answered from the reply to the first (cached or not),
// so many copies of one question cannot multiply an attacker's chances.
//
// Many queries share a socket, told apart by their IDs; one goroutine per
// socket reads its replies in batches and answers the clients. Nothing runs
// per query but a timer for its timeout. Truncated replies are asked again
// over TCP, on connections kept open for reuse while the upstream keeps
// them.

const (
	// udpSockets is the number of UDP sockets per upstream.
	udpSockets = 8
	// socketUses and socketAge bound how long one socket, and so one source
	// port, is used for new queries.
	socketUses = 256
	socketAge  = 30 * time.Second
	// replyBufSize is the largest UDP reply read from an upstream. Queries
	// go upstream advertising at most ednsSize; a larger reply (to a query
	// the slow path could not rewrite) is cut here and asked again over TCP.
	replyBufSize = 4096
	// idleTCPConns is how many idle TCP connections to one upstream are
	// kept for the next truncated reply, each for at most tcpReuse.
	idleTCPConns = 2
	tcpReuse     = 10 * time.Second
	// poolIdle is how long an upstream nobody asks keeps its sockets.
	poolIdle = time.Minute
)

var (
	errClosed   = errors.New("resolver is closed")
	errMismatch = errors.New("reply does not match the query")
)

// replyTo is where an asynchronous (forwarded) answer goes.
type replyTo struct {
	udp  *net.UDPConn
	addr netip.AddrPort
	tcp  *tcpConn
	// forwarded, when set, is a dry run's (Server.Answer): the question
	// is not forwarded, and *forwarded says it would have been.
	forwarded *bool
}

// send sends b (which it does not keep) without waiting for the client: a
// TCP client that does not read must not hold up the upstream socket's
// reader, which answers other clients too.
func (r replyTo) send(b []byte) {
	switch {
	case b == nil:
	case r.udp != nil:
		r.udp.WriteToUDPAddrPort(b, r.addr)
	case r.tcp != nil:
		msg := frame(b)
		go r.tcp.writeFramed(msg)
	}
}

// forwardJob is a question for upstream or network-local servers.
type forwardJob struct {
	req     []byte           // the client's query, copied
	targets []netip.AddrPort // tried in order
	limit   int              // largest reply the client takes
	qtype   uint16
	opt     int    // offset of the query's OPT record, -1 when unknown
	key     []byte // the cache key, which joins identical questions; nil: neither joined nor cached
	query   query  // the fast path's reading of req (no qname), with key
	local   bool   // targets are a network-local server, not the upstreams
}

// startForward sends job upstream; its answer goes to `to`. Beyond
// maxForwards in flight it answers SERVFAIL at once.
func (s *Server) startForward(job *forwardJob, to replyTo) {
	if to.forwarded != nil {
		*to.forwarded = true
		return
	}
	if s.inflight.Add(1) > s.maxInflight.Load() {
		s.inflight.Add(-1)
		s.metrics.count(job.qtype, rcodeServFail)
		to.send(servFail(job.req))
		return
	}
	s.wg.Add(1)
	p := &pending{forwardJob: job, s: s, to: to}
	if job.key != nil && s.fwd.join(p) {
		return // answered when the same question in flight is
	}
	p.start()
}

// start sends p to its first target.
func (p *pending) start() {
	p.s.metrics.forwarded.Inc()
	p.targets = p.s.fwd.order(p.targets)
	p.q = upstreamQuery(p.req, p.opt)
	p.try()
}

// join makes p wait for an identical question (same cache key) already in
// flight, reporting true; or, when there is none, makes p the one the next
// identical questions wait for. An upstream is asked each question once
// at a time: it saves the upstream work, and an off-path attacker cannot
// raise its odds by having many identical queries in flight (the birthday
// attack on DNS). There is no bound on the questions waiting: each counts
// against the bound on questions in flight (startForward).
func (f *forwarder) join(p *pending) bool {
	k := string(p.key)
	f.joinMu.Lock()
	defer f.joinMu.Unlock()
	if first := f.joining[k]; first != nil {
		first.joiners = append(first.joiners, p)
		return true
	}
	f.joining[k] = p
	p.leads = true
	return false
}

// takeJoiners ends p's turn as the question identical ones wait for, and
// returns those that waited.
func (p *pending) takeJoiners() []*pending {
	f := p.s.fwd
	f.joinMu.Lock()
	defer f.joinMu.Unlock()
	if k := string(p.key); f.joining[k] == p {
		delete(f.joining, k)
	}
	joiners := p.joiners
	p.joiners = nil
	return joiners
}

// answerJoiners answers the questions that waited for p from e, the entry
// of p's reply (cached or not). When e is nil (a reply that cannot be
// taken apart) they go upstream, but still one at a time: the first is
// forwarded and the others wait for it, or they wait for an identical
// question that went upstream since.
func (p *pending) answerJoiners(joiners []*pending, e *cached, now time.Time) {
	if e == nil {
		f := p.s.fwd
		k := string(p.key)
		var lead *pending
		f.joinMu.Lock()
		if cur := f.joining[k]; cur != nil {
			cur.joiners = append(cur.joiners, joiners...)
		} else {
			lead = joiners[0]
			lead.leads, lead.joiners = true, slices.Clone(joiners[1:])
			f.joining[k] = lead
		}
		f.joinMu.Unlock()
		if lead != nil {
			lead.start()
		}
		return
	}
	for _, j := range joiners {
		if e.qend != j.query.qend { // cannot be: the same key is the same question
			j.start()
			continue
		}
		resp := e.serve(j.req, &j.query, nil, j.limit, now)
		p.s.metrics.count(j.qtype, resp[3]&0x0F)
		j.to.send(resp)
		j.done()
	}
}

// upstreamQuery is the query as it goes upstream: the client's, advertising
// at most ednsSize so that replies are not fragmented (fragments are the
// easiest to spoof).
func upstreamQuery(req []byte, opt int) []byte {
	q := bytes.Clone(req)
	if opt >= 0 && opt+5 <= len(q) && binary.BigEndian.Uint16(q[opt+3:]) > ednsSize {
		binary.BigEndian.PutUint16(q[opt+3:], ednsSize)
	}
	return q
}

// pending is one forwarded question until it is answered.
type pending struct {
	*forwardJob
	s        *Server
	to       replyTo
	q        []byte // the query as sent; its ID is the current attempt's
	next     int    // index in targets of the next attempt
	fallback []byte // a SERVFAIL or REFUSED reply, kept while others are asked
	sent     bool   // q went out once: a retry writes its ID into a copy

	leads   bool       // identical questions may wait for this one
	joiners []*pending // they, guarded by forwarder.joinMu
}

// try asks the next target, or finishes when none is left. Attempts are
// sequential: try runs again only when the previous attempt ended.
func (p *pending) try() {
	for p.next < len(p.targets) {
		target := p.targets[p.next]
		p.next++
		if p.sent {
			// An earlier attempt's write (or TCP exchange) may still be
			// reading q when its timeout hands the query on.
			p.q = bytes.Clone(p.q)
		}
		p.sent = true
		err := errClosed
		for range 2 { // a pool the janitor just closed: once more with a new one
			u := p.s.fwd.upstream(target)
			if u == nil {
				break
			}
			if err = u.send(p); !errors.Is(err, errClosed) {
				break
			}
		}
		if err == nil {
			return
		}
		p.s.log.Debug("upstream failed", "upstream", target, "err", err)
		if !errors.Is(err, errClosed) {
			p.s.fwd.failed(target, err)
		}
	}
	p.finish(p.fallback)
}

// finish answers the client with resp (a reply from upstream, ours to
// change) or, when nil, SERVFAIL; and caches it when it may. What resp
// says about the mesh is taken out first (unmesh.go).
func (p *pending) finish(resp []byte) {
	s := p.s
	if resp == nil {
		resp = servFail(p.req) // and a name that joined the roster meanwhile is the roster's
	}
	resp, cacheable := s.unmesh(s.table.Load(), p.req, resp)
	resp[0], resp[1] = p.req[0], p.req[1]
	now := time.Now()
	var e *cached // the reply for the cache and the questions that waited
	if p.key != nil && s.cache != nil {
		var keep bool
		e, keep = s.cache.entry(resp, now)
		if keep && cacheable {
			s.cache.put(p.key, e, s.isMeshName)
		}
	}
	var joiners []*pending
	if p.leads {
		// Taken after the answer is cached, so that an identical question
		// arriving meanwhile finds one or the other.
		joiners = p.takeJoiners()
		if len(joiners) > 0 && s.cache == nil {
			e, _ = makeEntry(resp, now, math.MaxUint32, math.MaxUint32)
		}
	}
	out := fit(resp, p.limit) // after the entry: fit cuts resp in place
	s.metrics.count(p.qtype, out[3]&0x0F)
	p.to.send(out)
	if len(joiners) > 0 {
		p.answerJoiners(joiners, e, now)
	}
	p.done()
}

// done releases p's place among the questions in flight.
func (p *pending) done() {
	p.s.inflight.Add(-1)
	p.s.wg.Done()
}

// isMeshName reports whether the roster being served holds the lowercase
// wire name, or a zone holding it.
func (s *Server) isMeshName(name []byte) bool {
	t := s.table.Load()
	if t == nil {
		return false
	}
	_, found, zi := t.lookup(name)
	return found || zi != 0
}

// attempt is one query to one upstream over UDP.
type attempt struct {
	p     *pending
	up    *upstream
	sock  *upSock
	id    uint16
	start time.Time
	timer *time.Timer
}

// expire ends an attempt that got no answer in time.
func (a *attempt) expire() {
	if !a.sock.claim(a) {
		return // answered meanwhile
	}
	a.p.s.metrics.latency.Observe(time.Since(a.start).Seconds())
	a.p.s.fwd.failed(a.up.addr, errTimeout)
	a.p.try()
}

var (
	errTimeout  = errors.New("no answer in time")
	errServFail = errors.New("answered SERVFAIL")
	errRefused  = errors.New("answered REFUSED")
)

// rcodeFailure is the failure an upstream's reply b reports, nil when b is
// an answer. An upstream that answers SERVFAIL or REFUSED is skipped like
// one that does not answer: one that fails every question (it lost its
// own upstreams, or refuses us) must not be asked first forever.
func rcodeFailure(b []byte) error {
	switch b[3] & 0x0F {
	case rcodeServFail:
		return errServFail
	case rcodeRefused:
		return errRefused
	}
	return nil
}

// reply takes the upstream's answer b (valid until reply returns).
func (a *attempt) reply(b []byte) {
	p := a.p
	p.s.metrics.latency.Observe(time.Since(a.start).Seconds())
	failure := rcodeFailure(b)
	switch {
	case b[2]&0x02 != 0: // TC: ask again over TCP
		a.up.succeeded()
		trunc := bytes.Clone(b)
		go p.overTCP(a.up, trunc)
	case failure != nil:
		p.s.fwd.failed(a.up.addr, failure)
		p.fallback = bytes.Clone(b) // another upstream may do better
		p.try()
	default:
		a.up.succeeded()
		p.finish(b)
	}
}

// overTCP asks u again over TCP after a truncated reply; when that fails the
// client gets the truncated reply, and may retry over TCP itself.
func (p *pending) overTCP(u *upstream, trunc []byte) {
	start := time.Now()
	resp, err := u.exchangeTCP(p.s.ctx, p.q, p.s.cfg.UpstreamTimeout)
	p.s.metrics.latency.Observe(time.Since(start).Seconds())
	if err != nil {
		p.s.log.Debug("upstream failed over TCP", "upstream", u.addr, "err", err)
		p.finish(trunc)
		return
	}
	if failure := rcodeFailure(resp); failure != nil {
		p.s.fwd.failed(u.addr, failure)
		p.fallback = resp
		p.try()
		return
	}
	p.finish(resp)
}

func servFail(req []byte) []byte { return errorReply(req, rcodeServFail) }

// fit truncates a reply that exceeds limit to its header and question with
// TC set, so the client retries over TCP.
func fit(resp []byte, limit int) []byte {
	if len(resp) <= limit {
		return resp
	}
	end := headerLen
	if qend, ok := questionEnd(resp); ok {
		end = qend
	}
	out := resp[:end]
	out[2] |= 0x02 // TC
	if end == headerLen {
		out[4], out[5] = 0, 0
	}
	for i := 6; i < headerLen; i++ {
		out[i] = 0
	}
	return out
}

// forwarder holds the upstreams being asked.
type forwarder struct {
	s *Server
	// uses is socketUses, less in tests that watch sockets rotate;
	// downFor is the constant downFor, more in tests on slow machines.
	uses, downFor atomic.Int64
	// mu guards the fields below.
	mu     sync.Mutex
	pools  map[netip.AddrPort]*upstream
	closed bool

	// joinMu guards joining, and the joiners of the pendings in it.
	joinMu  sync.Mutex
	joining map[string]*pending // questions in flight others may wait for, by cache key
}

// upstream returns the pool of addr, made on first use; nil once closed.
func (f *forwarder) upstream(addr netip.AddrPort) *upstream {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	u := f.pools[addr]
	if u == nil || u.isClosed() {
		u = &upstream{f: f, addr: addr, lastUse: time.Now()}
		f.pools[addr] = u
	}
	return u
}

// janitor closes the sockets of upstreams nobody asked for poolIdle, and
// idle TCP connections past tcpReuse, until ctx ends.
func (f *forwarder) janitor(ctx context.Context) {
	tick := time.NewTicker(poolIdle / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			f.mu.Lock()
			var idle []*upstream
			for a, u := range f.pools {
				if u.idleSince(now) > poolIdle {
					delete(f.pools, a)
					idle = append(idle, u)
				}
			}
			pools := make([]*upstream, 0, len(f.pools))
			for _, u := range f.pools {
				pools = append(pools, u)
			}
			f.mu.Unlock()
			for _, u := range idle {
				u.close()
			}
			for _, u := range pools {
				u.dropStaleTCP(now)
			}
		}
	}
}

// close closes every socket; queries in flight are answered SERVFAIL.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	pools := f.pools
	f.pools = nil
	f.mu.Unlock()
	for _, u := range pools {
		u.close()
	}
}

// upstream is one server: its UDP sockets, idle TCP connections and health.
type upstream struct {
	f    *forwarder
	addr netip.AddrPort

	// mu guards the fields below.
	mu       sync.Mutex
	socks    [udpSockets]*upSock
	retired  []*upSock // replaced, closing once their last attempt ends
	idleTCP  []idleConn
	lastUse  time.Time
	closed   bool
	fails    int       // consecutive failures
	downTill time.Time // skipped until then, when fails > 0
}

type idleConn struct {
	c     net.Conn
	since time.Time
}

// send registers an attempt of p on one of u's sockets and sends p's query.
func (u *upstream) send(p *pending) error {
	sock, err := u.pick()
	if err != nil {
		return err
	}
	// p.q is read here, before register: once registered, the attempt's
	// timeout may start the next one, which replaces p.q.
	q := p.q
	a := &attempt{p: p, up: u, sock: sock}
	if err := sock.register(a, q, p.s.cfg.UpstreamTimeout); err != nil {
		return err
	}
	if _, err := sock.conn.Write(q); err != nil {
		if sock.claim(a) {
			a.timer.Stop()
			return err
		}
	}
	return nil
}

// pick returns a socket at random, replacing a retired one.
func (u *upstream) pick() (*upSock, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil, errClosed
	}
	now := time.Now()
	u.lastUse = now
	i := mrand.IntN(udpSockets)
	s := u.socks[i]
	if s == nil || int64(s.uses) >= u.f.uses.Load() || now.Sub(s.born) >= socketAge || s.isClosed() {
		if s != nil {
			s.retire()
			u.retired = slices.DeleteFunc(u.retired, (*upSock).isClosed)
			if !s.isClosed() {
				u.retired = append(u.retired, s)
			}
		}
		ns, err := u.open(now)
		if err != nil {
			u.socks[i] = nil
			return nil, err
		}
		u.socks[i], s = ns, ns
	}
	s.uses++
	return s, nil
}

// open makes a new socket connected to u, on a port the kernel picks at
// random among its ephemeral ports, with its reader. u.mu must be held.
func (u *upstream) open(now time.Time) (*upSock, error) {
	network := "udp4"
	if u.addr.Addr().Is6() {
		network = "udp6"
	}
	c, err := net.DialUDP(network, nil, net.UDPAddrFromAddrPort(u.addr))
	if err != nil {
		return nil, err
	}
	s := &upSock{up: u, conn: c, born: now, pending: map[uint16]*attempt{}}
	u.f.s.wg.Go(s.read)
	return s, nil
}

func (u *upstream) isClosed() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.closed
}

// idleSince is how long u has not been asked; 0 while it is being skipped,
// so that its failures are remembered.
func (u *upstream) idleSince(now time.Time) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fails > 0 && now.Before(u.downTill) {
		return 0
	}
	return now.Sub(u.lastUse)
}

// close closes u's sockets and connections; queries waiting on them go on
// to their next target, or are answered.
func (u *upstream) close() {
	u.mu.Lock()
	u.closed = true
	socks := slices.Concat(u.socks[:], u.retired) // a copy: u.socks is cleared below
	u.socks = [udpSockets]*upSock{}
	u.retired = nil
	idle := u.idleTCP
	u.idleTCP = nil
	u.mu.Unlock()
	for _, c := range idle {
		c.c.Close()
	}
	for _, s := range socks {
		if s != nil {
			s.fail(errClosed)
		}
	}
}

// exchangeTCP asks u over TCP, on an idle connection when there is one
// (again on a new one when that fails: the upstream may have closed it).
func (u *upstream) exchangeTCP(ctx context.Context, q []byte, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		c, reused := u.takeTCP(time.Now())
		if c == nil {
			var d net.Dialer
			nc, err := d.DialContext(ctx, "tcp", u.addr.String())
			if err != nil {
				return nil, err
			}
			c = nc
		}
		resp, err := roundTripTCP(ctx, c, q)
		if err == nil {
			u.putTCP(c)
			return resp, nil
		}
		c.Close()
		if !reused || ctx.Err() != nil {
			return nil, err
		}
	}
}

func (u *upstream) takeTCP(now time.Time) (net.Conn, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for len(u.idleTCP) > 0 {
		ic := u.idleTCP[len(u.idleTCP)-1]
		u.idleTCP = u.idleTCP[:len(u.idleTCP)-1]
		if now.Sub(ic.since) < tcpReuse {
			return ic.c, true
		}
		ic.c.Close()
	}
	return nil, false
}

func (u *upstream) putTCP(c net.Conn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || len(u.idleTCP) >= idleTCPConns {
		c.Close()
		return
	}
	u.idleTCP = append(u.idleTCP, idleConn{c: c, since: time.Now()})
}

func (u *upstream) dropStaleTCP(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	kept := u.idleTCP[:0]
	for _, ic := range u.idleTCP {
		if now.Sub(ic.since) < tcpReuse {
			kept = append(kept, ic)
		} else {
			ic.c.Close()
		}
	}
	clear(u.idleTCP[len(kept):])
	u.idleTCP = kept
}

// roundTripTCP sends q on c and reads its reply, within ctx. On success c
// has no deadline left and can be reused.
func roundTripTCP(ctx context.Context, c net.Conn, q []byte) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(q)), uint16(len(q)))
	resp, err := func() ([]byte, error) {
		if _, err := c.Write(append(msg, q...)); err != nil {
			return nil, err
		}
		var lb [2]byte
		if _, err := io.ReadFull(c, lb[:]); err != nil {
			return nil, err
		}
		resp := make([]byte, binary.BigEndian.Uint16(lb[:]))
		if _, err := io.ReadFull(c, resp); err != nil {
			return nil, err
		}
		if !matches(q, resp) {
			return nil, errMismatch
		}
		return resp, nil
	}()
	if !stop() {
		return nil, context.Cause(ctx) // the deadline was cut: not reusable
	}
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return resp, nil
}

// upSock is one UDP socket connected to an upstream, with the attempts
// waiting on it by ID.
type upSock struct {
	up   *upstream
	conn *net.UDPConn
	// born and uses are guarded by up.mu.
	born time.Time
	uses int

	// mu guards the fields below.
	mu      sync.Mutex
	pending map[uint16]*attempt
	retired bool // no new attempts; closed when the last one ends
	closed  bool
}

// register gives a its random ID on s, not one in use there, writes the ID
// into its query and starts its timer.
func (s *upSock) register(a *attempt, q []byte, timeout time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	var b [2]byte
	for {
		rand.Read(b[:])
		a.id = binary.BigEndian.Uint16(b[:])
		if s.pending[a.id] == nil {
			break
		}
	}
	q[0], q[1] = b[0], b[1]
	s.pending[a.id] = a
	a.start = time.Now()
	a.timer = time.AfterFunc(timeout, a.expire)
	return nil
}

// claim takes a off s, reporting false when something else (its reply, its
// timeout, a failure) took it first. Exactly one of them handles it.
func (s *upSock) claim(a *attempt) bool {
	s.mu.Lock()
	if s.pending[a.id] != a {
		s.mu.Unlock()
		return false
	}
	delete(s.pending, a.id)
	done := s.retired && len(s.pending) == 0 && !s.closed
	if done {
		s.closed = true
	}
	s.mu.Unlock()
	if done {
		s.conn.Close()
	}
	return true
}

// deliver hands a datagram read from s to the attempt it answers. Anything
// that is not a reply to a query in flight with its ID and question is
// dropped. truncated says the datagram did not fit the buffer.
func (s *upSock) deliver(b []byte, truncated bool) {
	if len(b) < headerLen {
		return
	}
	id := binary.BigEndian.Uint16(b)
	s.mu.Lock()
	a := s.pending[id]
	ok := a != nil && matches(a.p.q, b)
	s.mu.Unlock()
	if !ok || !s.claim(a) {
		return
	}
	a.timer.Stop()
	if truncated {
		b[2] |= 0x02
	}
	a.reply(b)
}

func (s *upSock) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// retire stops new attempts on s and closes it once none is waiting.
func (s *upSock) retire() {
	s.mu.Lock()
	s.retired = true
	done := len(s.pending) == 0 && !s.closed
	if done {
		s.closed = true
	}
	s.mu.Unlock()
	if done {
		s.conn.Close()
	}
}

// fail closes s and moves every attempt waiting on it to its next target:
// the socket is closed, or the upstream's port refused (ICMP).
func (s *upSock) fail(err error) {
	s.mu.Lock()
	waiting := make([]*attempt, 0, len(s.pending))
	for id, a := range s.pending {
		waiting = append(waiting, a)
		delete(s.pending, id)
	}
	wasClosed := s.closed
	s.closed, s.retired = true, true
	s.mu.Unlock()
	if !wasClosed {
		s.conn.Close()
	}
	for _, a := range waiting {
		a.timer.Stop()
		if !errors.Is(err, errClosed) {
			a.p.s.fwd.failed(a.up.addr, err)
		}
		a.p.try()
	}
}

// matches reports whether resp answers q: same ID, a response, the same
// question. The name's bytes are compared with ASCII letters folded (DNS
// names are case-insensitive in ASCII only, RFC 4343; every other byte,
// length octets included, must be equal), the type and class exactly.
func matches(q, resp []byte) bool {
	if len(resp) < headerLen || resp[0] != q[0] || resp[1] != q[1] || resp[2]&0x80 == 0 {
		return false
	}
	qe, ok1 := questionEnd(q)
	re, ok2 := questionEnd(resp)
	if !ok1 {
		return true // nothing to compare: the ID has to do
	}
	if !ok2 || qe != re || resp[4] != q[4] || resp[5] != q[5] {
		return false
	}
	return equalFoldASCII(q[headerLen:qe-4], resp[headerLen:re-4]) && string(q[qe-4:qe]) == string(resp[re-4:re])
}

// equalFoldASCII reports whether a and b are equal with ASCII letters
// folded, byte by byte.
func equalFoldASCII(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i, c := range a {
		if d := b[i]; c != d && lowerASCII(c) != lowerASCII(d) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
