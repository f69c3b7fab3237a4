package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/internal/plumbing/peercred"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// exposureVersion is the version of the exposure file.
//
// Versions:
//
//	1: listen, allow and forwards, as Exposure.
const exposureVersion = 1

type exposureFile struct {
	Version int `json:"version"`
	Exposure
}

// DefaultMaxRoster bounds the body of PUT and PATCH /v1/roster.
// It is the limit of every roster document, however it arrives.
const DefaultMaxRoster = spec.MaxDocumentBytes

// Config is what a Server needs; Resolver is required.
type Config struct {
	Resolver *resolver.Server
	// ExposurePath keeps the exposure across restarts (written atomically
	// before PUT /v1/exposure replies). Empty keeps nothing.
	ExposurePath string
	// Static are the addresses the resolver serves by its own
	// configuration, and StaticAllow its own client networks: an exposure
	// adds to them and never takes them away.
	Static      []netip.AddrPort
	StaticAllow []netip.Prefix
	// AllowUIDs may use the socket besides root and the process's own
	// user (the agent's, when it runs as another user).
	AllowUIDs []uint32
	// Version is reported in Status.
	Version string
	// ListenersChanged runs after an exposure added or removed listeners
	// (the command keeps systemd's file descriptor store in step).
	ListenersChanged func(added, removed []netip.AddrPort)
	// MaxRoster bounds a roster's size in bytes. Default DefaultMaxRoster.
	MaxRoster int64
	Logger    *slog.Logger
}

// Server is the resolver's side of the protocol. Its methods are safe for
// concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	// mu guards the fields below and serializes exposure changes.
	mu       sync.Mutex
	exposure Exposure                  // in force, normalized
	saved    []byte                    // what ExposurePath holds
	failed   map[netip.AddrPort]string // exposed addresses not served, and why

	// httpMu guards hs and stopped.
	httpMu  sync.Mutex
	hs      *http.Server
	stopped bool

	admit   func(uid uint32) bool // root, the process's user, cfg.AllowUIDs
	allowed func(uid uint32) bool // replaces allowedUID in tests
}

// NewServer returns a Server with the exposure saved at cfg.ExposurePath,
// not applied yet (Start applies it). A saved exposure that cannot be read
// is logged and ignored: the resolver must come up whatever its files say,
// and the agent asserts the exposure again.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Resolver == nil {
		return nil, errors.New("control: Config.Resolver is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxRoster <= 0 {
		cfg.MaxRoster = DefaultMaxRoster
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "resolver-control"),
		exposure: Exposure{}.Normalize(),
		failed:   map[netip.AddrPort]string{},
		admit:    peercred.Allow(cfg.AllowUIDs...),
	}
	if cfg.ExposurePath != "" {
		data, err := os.ReadFile(cfg.ExposurePath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			s.log.Error("reading the saved exposure; starting without it", "path", cfg.ExposurePath, "err", err)
		default:
			var f exposureFile
			if err := json.Unmarshal(data, &f); err != nil || f.Version != exposureVersion {
				s.log.Error("the saved exposure is unreadable; starting without it", "path", cfg.ExposurePath, "version", f.Version, "err", err)
			} else {
				s.exposure, s.saved = f.Exposure.Normalize(), data
			}
		}
	}
	return s, nil
}

// Exposure returns the exposure in force.
func (s *Server) Exposure() Exposure {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exposure
}

// ApplyClients puts the saved exposure's client networks and local
// forwards in force, and nothing else: call it before the resolver reads
// a single query from sockets handed over (a restart, a handover), which
// hold queries from those clients already; answered before, they would be
// REFUSED.
func (s *Server) ApplyClients() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cfg.Resolver.SetAllow(append(slices.Clone(s.cfg.StaticAllow), s.exposure.Allow...))
	for _, f := range s.exposure.Forwards {
		s.cfg.Resolver.SetLocalForward(f.Client, f.Zone, f.Server)
	}
	s.cfg.Resolver.SetNetworks(resolverNetworks(s.exposure.Networks))
}

// Start applies the saved exposure: the resolver listens on every exposed
// address it does not serve yet (those handed over from the previous
// process it serves already), allows and forwards as saved.
func (s *Server) Start() ExposureResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(s.exposure)
}

// Apply puts x in force and saves it. Addresses that cannot be served are
// in the result (and retried by Retry); the error says only that saving
// failed, in which case x is in force anyway.
func (s *Server) Apply(x Exposure) (ExposureResult, error) {
	x = x.Normalize()
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.applyLocked(x)
	return res, s.saveLocked()
}

// Retry listens again on the exposed addresses that failed, and reports
// whether any is still failing.
func (s *Server) Retry() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.failed) == 0 {
		return false
	}
	s.applyLocked(s.exposure)
	return len(s.failed) > 0
}

// applyLocked makes the resolver serve x besides its static configuration:
// new addresses first, then the allow list and forwards, then the
// addresses no longer wanted. s.mu must be held.
func (s *Server) applyLocked(x Exposure) ExposureResult {
	syncs.AssertLocked(&s.mu)
	srv := s.cfg.Resolver
	want := map[netip.AddrPort]bool{}
	for _, a := range s.cfg.Static {
		want[a] = true
	}
	for _, a := range x.Listen {
		want[a] = true
	}
	have := map[netip.AddrPort]bool{}
	for _, a := range srv.Listeners() {
		have[a] = true
	}
	var added, removed []netip.AddrPort
	failed := map[netip.AddrPort]string{}
	// Clients and forwards before listening, both old and new until the
	// old addresses are gone: no query is ever REFUSED, or forwarded
	// elsewhere, for arriving in between.
	srv.SetAllow(slices.Concat(s.cfg.StaticAllow, s.exposure.Allow, x.Allow))
	old := map[forwardKey]bool{}
	for _, f := range s.exposure.Forwards {
		old[f.key()] = true
	}
	for _, f := range x.Forwards {
		delete(old, f.key())
		srv.SetLocalForward(f.Client, f.Zone, f.Server)
	}
	for _, a := range x.Listen {
		if have[a] {
			continue
		}
		if err := srv.Listen(a); err != nil {
			failed[a] = err.Error()
			if s.failed[a] != err.Error() {
				s.log.Error("cannot serve an exposed address; retrying", "addr", a, "err", err)
			}
			continue
		}
		added = append(added, a)
	}
	for a := range have {
		if want[a] {
			continue
		}
		if err := srv.Unlisten(a); err != nil {
			s.log.Warn("stopping an address no longer exposed", "addr", a, "err", err)
			continue
		}
		removed = append(removed, a)
	}
	srv.SetAllow(append(slices.Clone(s.cfg.StaticAllow), x.Allow...))
	for k := range old {
		srv.SetLocalForward(k.client, k.zone, netip.AddrPort{})
	}
	srv.SetNetworks(resolverNetworks(x.Networks))
	if !x.Equal(s.exposure) {
		s.log.Info("exposure in force", "listen", x.Listen, "allow", x.Allow, "forwards", len(x.Forwards))
	}
	s.exposure, s.failed = x, failed
	if (len(added) > 0 || len(removed) > 0) && s.cfg.ListenersChanged != nil {
		s.cfg.ListenersChanged(added, removed)
	}
	return ExposureResult{Listeners: srv.Listeners(), Failed: failedText(failed)}
}

func failedText(m map[netip.AddrPort]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for a, why := range m {
		out[a.String()] = why
	}
	return out
}

// saveLocked writes the exposure when it differs from the file. s.mu
// must be held.
func (s *Server) saveLocked() error {
	syncs.AssertLocked(&s.mu)
	if s.cfg.ExposurePath == "" {
		return nil
	}
	data, err := json.MarshalIndent(exposureFile{Version: exposureVersion, Exposure: s.exposure}, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if string(data) == string(s.saved) {
		return nil
	}
	if err := atomicfile.Write(s.cfg.ExposurePath, data, 0o600); err != nil {
		return fmt.Errorf("saving the exposure to %q: %w", s.cfg.ExposurePath, err)
	}
	s.saved = data
	return nil
}

// Status returns what GET /v1/status does.
func (s *Server) Status() Status {
	s.mu.Lock()
	x, failed := s.exposure, failedText(s.failed)
	s.mu.Unlock()
	return Status{
		Version:    s.cfg.Version,
		PID:        os.Getpid(),
		Generation: s.cfg.Resolver.Generation(),
		Listeners:  s.cfg.Resolver.Listeners(),
		Exposure:   x,
		Failed:     failed,
	}
}

// Handler serves the protocol (without the peer check: Serve adds it).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Status())
	})
	mux.HandleFunc("GET /v1/roster", s.getRoster)
	mux.HandleFunc("PUT /v1/roster", s.putRoster)
	mux.HandleFunc("PATCH /v1/roster", s.patchRoster)
	mux.HandleFunc("GET /v1/exposure", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Exposure())
	})
	mux.HandleFunc("PUT /v1/exposure", s.putExposure)
	mux.HandleFunc("GET /v1/canary", func(w http.ResponseWriter, r *http.Request) {
		nonce := r.URL.Query().Get("nonce")
		if nonce == "" {
			writeJSON(w, http.StatusBadRequest, RosterResult{Error: "give ?nonce=LABEL"})
			return
		}
		c := Canary{Address: resolver.CanaryAddress(nonce)}
		if z := r.URL.Query().Get("zone"); z != "" {
			c.Name = resolver.CanaryName(nonce, z)
		}
		writeJSON(w, http.StatusOK, c)
	})
	return mux
}

func (s *Server) getRoster(w http.ResponseWriter, r *http.Request) {
	ro := s.cfg.Resolver.Roster()
	if ro == nil {
		writeJSON(w, http.StatusNotFound, RosterResult{Error: "no roster served yet"})
		return
	}
	data, err := ro.MarshalJSON()
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, RosterResult{Error: err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
}

func (s *Server) putRoster(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRoster))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, RosterResult{Generation: s.cfg.Resolver.Generation(), Error: "reading the roster: " + err.Error()})
		return
	}
	ro, err := specjson.Reader{Busy: s.cfg.Resolver.Busy}.ParseRoster(data) // steps aside while queries wait
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, RosterResult{Generation: s.cfg.Resolver.Generation(), Error: err.Error(), Reason: string(admit.Invalid)})
		return
	}
	srv := s.cfg.Resolver
	judge := func() admit.Decision {
		return admit.ServedRoster("roster", ro, srv.Generation(), func() []string { return srv.Differences(ro, 10) })
	}
	s.answerRoster(w, ro.Generation, judge, func() error { return srv.Update(ro) })
}

// answerRoster answers a roster change to generation gen: judged first
// (admit: the same again is 200 and changes nothing; an older roster, the
// generation served with other names, or a delta from another base is
// 409), then put in force by change; a change that lost a race to another
// is judged again.
func (s *Server) answerRoster(w http.ResponseWriter, gen uint64, judge func() admit.Decision, change func() error) {
	dec := judge()
	var err error
	if dec.Verdict == admit.Accepted {
		if err = change(); errors.Is(err, resolver.ErrStaleGeneration) || errors.Is(err, spec.ErrDeltaBase) {
			dec = judge()
		}
	}
	served := s.cfg.Resolver.Generation()
	switch {
	case dec.Verdict == admit.Same:
		writeJSON(w, http.StatusOK, RosterResult{Generation: served})
	case dec.Verdict == admit.Refused && dec.Reason == admit.DeltaBase:
		writeJSON(w, http.StatusConflict, RosterResult{Generation: served, Error: dec.Err().Error(), Conflict: ConflictDeltaBase, Reason: string(dec.Reason)})
	case dec.Verdict == admit.Refused:
		writeJSON(w, http.StatusConflict, RosterResult{Generation: served, Error: dec.Err().Error(), Conflict: ConflictNotNewer, Reason: string(dec.Reason)})
	case err == nil:
		writeJSON(w, http.StatusOK, RosterResult{Generation: served})
	case errors.Is(err, resolver.ErrStaleGeneration): // judged Accepted again: cannot be
		writeJSON(w, http.StatusConflict, RosterResult{Generation: served, Error: err.Error(), Conflict: ConflictNotNewer})
	case errors.Is(err, spec.ErrDeltaBase):
		writeJSON(w, http.StatusConflict, RosterResult{Generation: served, Error: err.Error(), Conflict: ConflictDeltaBase})
	case served == gen:
		// Served, not saved (a full disk): the caller must know both.
		s.log.Error("roster served but not saved", "roster_generation", served, "err", err)
		writeJSON(w, http.StatusInternalServerError, RosterResult{Generation: served, Error: err.Error()})
	default:
		writeJSON(w, http.StatusUnprocessableEntity, RosterResult{Generation: served, Error: err.Error(), Reason: string(admit.Invalid)})
	}
}

// patchRoster puts a roster delta in force (resolver.Server.Apply): the
// change of k names costs the resolver k, where PUT costs it the whole
// roster. A delta whose From is not the generation served is refused (409,
// ConflictDeltaBase: the agent reads the roster again and sends what it
// lacks); the same delta again (its To served, with the names it carries)
// is 200 and changes nothing; one whose To is served with other names, or
// older, is refused as not newer (409, ConflictNotNewer).
func (s *Server) patchRoster(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxRoster))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, RosterResult{Generation: s.cfg.Resolver.Generation(), Error: "reading the roster delta: " + err.Error()})
		return
	}
	d, err := specjson.ParseRosterDelta(data)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, RosterResult{Generation: s.cfg.Resolver.Generation(), Error: err.Error(), Reason: string(admit.Invalid)})
		return
	}
	srv := s.cfg.Resolver
	judge := func() admit.Decision {
		return admit.ServedDelta(d, srv.Generation(), func() []string { return srv.DeltaDifferences(d, 10) })
	}
	s.answerRoster(w, d.To, judge, func() error { return srv.Apply(d) })
}

func (s *Server) putExposure(w http.ResponseWriter, r *http.Request) {
	var x Exposure
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&x); err != nil {
		writeJSON(w, http.StatusBadRequest, RosterResult{Error: "reading the exposure: " + err.Error()})
		return
	}
	res, err := s.Apply(x)
	if err != nil {
		s.log.Error("exposure in force but not saved", "err", err)
		writeJSON(w, http.StatusInternalServerError, struct {
			ExposureResult
			Error string `json:"error"`
		}{res, err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// Listen opens the control socket at path with mode (0600 or 0660, say),
// replacing a stale socket file that nobody accepts on.
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if c, err := net.Dial("unix", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: another process serves it", path)
	}
	os.Remove(path)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // a successor serves the same socket
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return l, nil
}

// Resume serves l after a Shutdown (a handover that failed half-way).
func (s *Server) Resume(l net.Listener) error {
	s.httpMu.Lock()
	s.stopped = false
	s.httpMu.Unlock()
	return s.Serve(l)
}

// Serve answers the protocol on l until Shutdown, admitting only root,
// the process's own user and Config.AllowUIDs; other peers are logged and
// hung up on.
func (s *Server) Serve(l net.Listener) error {
	hs := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	s.httpMu.Lock()
	if s.stopped {
		s.httpMu.Unlock()
		l.Close()
		return nil
	}
	s.hs = hs
	s.httpMu.Unlock()
	allowed := s.allowedUID
	if s.allowed != nil {
		allowed = s.allowed
	}
	err := hs.Serve(&peercred.Listener{Listener: l, Allowed: allowed, What: "control socket", Log: s.log})
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops Serve, or a Serve about to start: no new request is
// taken, and those in progress end first (their changes saved). It closes
// the listener Serve was given.
func (s *Server) Shutdown(ctx context.Context) error {
	s.httpMu.Lock()
	hs := s.hs
	s.hs, s.stopped = nil, true
	s.httpMu.Unlock()
	if hs == nil {
		return nil
	}
	return hs.Shutdown(ctx)
}

func (s *Server) allowedUID(uid uint32) bool { return s.admit(uid) }
