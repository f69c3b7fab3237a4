package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// ErrUnreachable wraps every error of a request that did not reach the
// resolver (its socket is missing, or nothing answers on it).
var ErrUnreachable = errors.New("the resolver's control socket does not answer")

// ClientConfig is what a Client needs; Path is required.
type ClientConfig struct {
	// Path is the resolver's control socket.
	Path string
	// Timeout bounds a request. Default 10s; a roster's is 6 times that.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Client is the agent's side of the protocol. It has the methods the agent
// uses on an in-process *resolver.Server, and keeps the exposure it has
// been told: every change puts the whole of it, so a request that failed
// is made good by the next one (or by Sync). New makes no request: a
// Client exists, and says so through errors, while the resolver is down.
//
// A Client that reaches the resolver for the first time keeps what the
// resolver already exposed (from the previous agent, or its saved state)
// beside what it is told, until Settle: a restarted agent re-asserts the
// exposure network by network, and no address or client network it is
// about to assert again stops being served in between. Its methods are
// safe for concurrent use.
type Client struct {
	cfg  ClientConfig
	http *http.Client
	log  *slog.Logger

	// mu guards the fields below and serializes the puts of the exposure,
	// so that the last one put is the last one told.
	mu        sync.Mutex
	told      Exposure  // what this Client was told, normalized
	inherited *Exposure // what the resolver held when first reached; nil: not read yet
	settled   bool
	failed    map[netip.AddrPort]string // from the last put
	listeners []netip.AddrPort          // from the last put
	err       error                     // of the last put; nil when in step

	alive atomic.Pointer[aliveState] // Watch's last look
}

// NewClient returns a Client of the socket at cfg.Path.
func NewClient(cfg ClientConfig) *Client {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", cfg.Path)
		},
		MaxIdleConns:    2,
		IdleConnTimeout: 30 * time.Second,
	}
	return &Client{
		cfg:  cfg,
		http: &http.Client{Transport: tr},
		log:  cfg.Logger.With("component", "resolver-client"),
		told: Exposure{}.Normalize(),
	}
}

// Path is the control socket's path.
func (c *Client) Path() string { return c.cfg.Path }

// do sends a request and decodes a JSON reply into out (when not nil). It
// returns the status code; err wraps ErrUnreachable when the resolver was
// not reached.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://resolver"+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%w (%s): %v", ErrUnreachable, c.cfg.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%w (%s): reading the reply: %v", ErrUnreachable, c.cfg.Path, err)
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil && resp.StatusCode < 300 {
			return resp.StatusCode, fmt.Errorf("%s %s: reply: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

func (c *Client) ctx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Status asks the resolver how it is.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	code, err := c.do(ctx, http.MethodGet, "/v1/status", nil, &st)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("resolver status: HTTP %d", code)
	}
	return st, err
}

// Ping reports whether the resolver answers, in at most timeout.
func (c *Client) Ping(timeout time.Duration) error {
	ctx, cancel := c.ctx(timeout)
	defer cancel()
	_, err := c.Status(ctx)
	return err
}

// Update puts r in force: it returns nil once the resolver serves and has
// saved it, an error wrapping resolver.ErrStaleGeneration when it serves a
// generation as new or newer, and an error naming the generation served
// otherwise (served but not saved, when that generation is r's).
func (c *Client) Update(r *spec.Roster) error {
	if r == nil {
		return errors.New("roster is nil")
	}
	data, err := r.MarshalJSON()
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx(6 * c.cfg.Timeout)
	defer cancel()
	var res RosterResult
	code, err := c.do(ctx, http.MethodPut, "/v1/roster", data, &res)
	switch {
	case err != nil:
		return fmt.Errorf("roster generation %d: %w", r.Generation, err)
	case code == http.StatusOK:
		return nil
	case code == http.StatusConflict:
		return fmt.Errorf("%w: got generation %d, serving %d", resolver.ErrStaleGeneration, r.Generation, res.Generation)
	default:
		return fmt.Errorf("roster generation %d (resolver serves %d): HTTP %d: %s", r.Generation, res.Generation, code, res.Error)
	}
}

// Apply puts the roster delta d in force, as resolver.Server.Apply does:
// the resolver reads, checks, swaps in and saves d's names alone. It
// returns nil once the resolver serves and has saved generation d.To; an
// error wrapping spec.ErrDeltaBase when the resolver serves another
// generation than d.From (read the roster again, and send what it lacks);
// one wrapping resolver.ErrStaleGeneration when it serves d.To or newer
// already (the same delta sent twice changes nothing); and an error naming
// the generation served otherwise.
//
// A resolver older than deltas (HTTP 404 or 405) is sent the whole
// roster: the one it serves, changed by d.
func (c *Client) Apply(d *spec.RosterDelta) error {
	if d == nil {
		return errors.New("roster delta is nil")
	}
	data, err := d.MarshalJSON()
	if err != nil {
		return err
	}
	ctx, cancel := c.ctx(6 * c.cfg.Timeout) // a first delta may hold every name
	defer cancel()
	var res RosterResult
	code, err := c.do(ctx, http.MethodPatch, "/v1/roster", data, &res)
	switch {
	case err != nil:
		return fmt.Errorf("roster delta %d -> %d: %w", d.From, d.To, err)
	case code == http.StatusOK:
		return nil
	case code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
		return c.applyWhole(ctx, d)
	case code == http.StatusConflict && res.Conflict == ConflictDeltaBase:
		return fmt.Errorf("%w: the delta is from generation %d, the resolver serves %d", spec.ErrDeltaBase, d.From, res.Generation)
	case code == http.StatusConflict:
		return fmt.Errorf("%w: got a delta to generation %d, serving %d", resolver.ErrStaleGeneration, d.To, res.Generation)
	default:
		return fmt.Errorf("roster delta %d -> %d (resolver serves %d): HTTP %d: %s", d.From, d.To, res.Generation, code, res.Error)
	}
}

// applyWhole is Apply for a resolver that takes whole rosters only.
func (c *Client) applyWhole(ctx context.Context, d *spec.RosterDelta) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("roster delta %d -> %d: %w", d.From, d.To, err)
	}
	r, err := c.RosterContext(ctx)
	if err != nil {
		return fmt.Errorf("roster delta %d -> %d: %w", d.From, d.To, err)
	}
	if r == nil {
		r = &spec.Roster{}
	}
	if _, err := r.Apply(d.Normalize()); err != nil {
		return err
	}
	return c.Update(r)
}

// RosterContext returns the roster the resolver serves; nil, nil before
// the first.
func (c *Client) RosterContext(ctx context.Context) (*spec.Roster, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://resolver/v1/roster", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w (%s): %v", ErrUnreachable, c.cfg.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("%w (%s): reading the roster: %v", ErrUnreachable, c.cfg.Path, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		r, err := specjson.ParseRoster(data)
		if err != nil {
			return nil, fmt.Errorf("the roster the resolver serves: %w", err)
		}
		return r, nil
	case http.StatusNotFound:
		return nil, nil
	}
	return nil, fmt.Errorf("reading the resolver's roster: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(data))
}

// Roster returns the roster the resolver serves, nil before the first or
// when the resolver does not answer (RosterContext tells the two apart).
func (c *Client) Roster() *spec.Roster {
	ctx, cancel := c.ctx(6 * c.cfg.Timeout)
	defer cancel()
	r, err := c.RosterContext(ctx)
	if err != nil {
		c.log.Warn("reading the roster the resolver serves", "err", err)
		return nil
	}
	return r
}

// Serving reports whether the resolver answers and serves a roster. While
// Watch runs it answers from Watch's last look, at once; otherwise it asks.
func (c *Client) Serving() bool {
	if a := c.alive.Load(); a != nil {
		return a.err == nil && a.status.Generation > 0
	}
	ctx, cancel := c.ctx(c.cfg.Timeout)
	defer cancel()
	st, err := c.Status(ctx)
	return err == nil && st.Generation > 0
}

// Canary returns the address the resolver answers for a probe's canary
// name with nonce (resolver.CanaryAddress, in the resolver's process).
func (c *Client) Canary(ctx context.Context, nonce string) (netip.Addr, error) {
	var cn Canary
	code, err := c.do(ctx, http.MethodGet, "/v1/canary?nonce="+url.QueryEscape(nonce), nil, &cn)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("resolver canary: HTTP %d", code)
	}
	return cn.Address, err
}

// Listen adds addr to the exposure; it returns why the resolver cannot
// serve it, if it cannot (it keeps trying).
func (c *Client) Listen(addr netip.AddrPort) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.told.Listen = append(c.told.Listen, addr)
	c.told = c.told.Normalize()
	if err := c.putLocked(); err != nil {
		return err
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if why, ok := c.failed[addr]; ok {
		return fmt.Errorf("the resolver cannot serve %s: %s", addr, why)
	}
	return nil
}

// Unlisten takes addr out of the exposure, inherited or told.
func (c *Client) Unlisten(addr netip.AddrPort) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	c.told.Listen = slices.DeleteFunc(c.told.Listen, func(a netip.AddrPort) bool { return a == addr })
	if c.inherited != nil {
		c.inherited.Listen = slices.DeleteFunc(c.inherited.Listen, func(a netip.AddrPort) bool { return a == addr })
	}
	return c.putLocked()
}

// SetAllow replaces the client networks told. A failure is kept for Err
// and made good by the next change or Sync.
func (c *Client) SetAllow(p []netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.told.Allow = slices.Clone(p)
	c.told = c.told.Normalize()
	c.putLocked()
}

// SetNetworks names the runtime's networks, so that the resolver counts
// refused clients by network (as resolver.Server.SetNetworks); put only
// when they changed. A failure is kept for Err.
func (c *Client) SetNetworks(nets []resolver.Network) {
	c.mu.Lock()
	defer c.mu.Unlock()
	x := c.told
	x.Networks = nil
	for _, n := range nets {
		x.Networks = append(x.Networks, Network{Name: n.Name, Prefixes: slices.Clone(n.Prefixes)})
	}
	if x = x.Normalize(); x.Equal(c.told) {
		return
	}
	c.told = x
	c.putLocked()
}

// SetLocalForward sets (or, with a zero server, removes) a local forward,
// as resolver.Server.SetLocalForward does. A failure is kept for Err.
func (c *Client) SetLocalForward(client netip.Prefix, zone string, server netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := Forward{Client: client.Masked(), Zone: spec.CanonicalName(zone)}.key()
	drop := func(f Forward) bool { return f.Client.Masked() == k.client && spec.CanonicalName(f.Zone) == k.zone }
	c.told.Forwards = slices.DeleteFunc(c.told.Forwards, drop)
	if c.inherited != nil {
		c.inherited.Forwards = slices.DeleteFunc(c.inherited.Forwards, drop)
	}
	if server.IsValid() {
		c.told.Forwards = append(c.told.Forwards, Forward{Client: client, Zone: zone, Server: server})
	}
	c.told = c.told.Normalize()
	c.putLocked()
}

// Listeners returns the addresses the resolver served after the last
// change this Client put (or, before any, asks it).
func (c *Client) Listeners() []netip.AddrPort {
	c.mu.Lock()
	if c.listeners != nil {
		defer c.mu.Unlock()
		return slices.Clone(c.listeners)
	}
	c.mu.Unlock()
	ctx, cancel := c.ctx(c.cfg.Timeout)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return nil
	}
	return st.Listeners
}

// Settle drops what the resolver exposed before this Client reached it and
// was not told again since: call it once the agent has asserted the whole
// exposure it wants (after its first complete pass).
func (c *Client) Settle() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.settled = true
	return c.putLocked()
}

// Sync puts the exposure again if the last put failed; it returns the
// error of the last put, nil when the resolver is in step.
func (c *Client) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		c.putLocked()
	}
	return c.err
}

// Err returns the error of the last put of the exposure, nil when the
// resolver has everything this Client was told.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Exposure returns the exposure the Client puts: what it was told, plus,
// before Settle, what the resolver held when first reached.
func (c *Client) Exposure() Exposure {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wantLocked()
}

func (c *Client) wantLocked() Exposure {
	syncs.AssertLocked(&c.mu)
	if c.settled || c.inherited == nil {
		return c.told
	}
	return union(*c.inherited, c.told)
}

// putLocked puts the whole exposure. c.mu must be held.
func (c *Client) putLocked() (err error) {
	syncs.AssertLocked(&c.mu)
	defer func() { c.err = err }()
	ctx, cancel := c.ctx(c.cfg.Timeout)
	defer cancel()
	if c.inherited == nil && !c.settled {
		var x Exposure
		code, err := c.do(ctx, http.MethodGet, "/v1/exposure", nil, &x)
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("reading the resolver's exposure: HTTP %d", code)
		}
		x = x.Normalize()
		c.inherited = &x
	}
	body, err := json.Marshal(c.wantLocked())
	if err != nil {
		return err
	}
	var res struct {
		ExposureResult
		Error string `json:"error"`
	}
	code, err := c.do(ctx, http.MethodPut, "/v1/exposure", body, &res)
	if err != nil {
		return err
	}
	c.listeners = res.Listeners
	c.failed = map[netip.AddrPort]string{}
	for a, why := range res.Failed {
		if ap, err := netip.ParseAddrPort(a); err == nil {
			c.failed[ap] = why
		}
	}
	if code != http.StatusOK {
		return fmt.Errorf("putting the exposure: HTTP %d: %s", code, res.Error)
	}
	return nil
}

// Watch asks the resolver how it is every interval until ctx ends, so that
// Alive answers at once (a health endpoint must never wait on a socket).
// After a failed put of the exposure it puts it again (Sync) once the
// resolver answers.
func (c *Client) Watch(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, min(interval, c.cfg.Timeout))
		st, err := c.Status(pctx)
		cancel()
		if err == nil {
			c.alive.Store(&aliveState{status: st})
			if c.Err() != nil {
				c.Sync()
			}
		} else if ctx.Err() == nil {
			c.alive.Store(&aliveState{err: err})
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

type aliveState struct {
	status Status
	err    error
}

// Alive returns the resolver's status as Watch last saw it, or why it did
// not answer; before Watch's first look, an error. It never blocks.
func (c *Client) Alive() (Status, error) {
	a := c.alive.Load()
	if a == nil {
		return Status{}, errors.New("the resolver has not been asked yet")
	}
	return a.status, a.err
}
