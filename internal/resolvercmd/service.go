package resolvercmd

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
	"github.com/meshhost/meshhost/internal/plumbing/sdnotify"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/resolver/handover"
)

// Names of the files a resolver hands over and keeps in systemd's store.
const (
	fileControl  = "control"
	fileHandover = "handover"
	prefixUDP    = "dns-udp-"
	prefixTCP    = "dns-tcp-"
)

// How long a resolver that stopped reading its sockets waits for the
// answers to the questions it forwarded (resolver.Server.Drain).
const (
	// drainHanded: the sockets live on, in a successor that reads them
	// already or in systemd's store, which hands them to the next process
	// only once this one has exited. A forward to an upstream slow to
	// answer (or silent) must not keep that process from reading, nor
	// from binding the metrics port this one holds: it is dropped, its
	// client asks again after its stub resolver's timeout, and whoever
	// reads the sockets then answers.
	drainHanded = 100 * time.Millisecond
	// drainAlone: nobody reads the sockets after this process (no
	// service manager keeps them): every answer it can still give is
	// worth a few seconds.
	drainAlone = 5 * time.Second
)

// fileName is the name a listener's socket travels under: systemd's file
// names may not hold ':', so the address's colons become '_'.
func fileName(prefix string, a netip.AddrPort) string {
	return prefix + strings.ReplaceAll(a.String(), ":", "_")
}

// inherited are the sockets this process was given at start: by systemd
// (its file descriptor store, LISTEN_FDS) or by the process it replaces
// (a handover).
type inherited struct {
	control, handover *os.File
	udp, tcp          map[string]*os.File // by address part of the name
}

func (in *inherited) add(name string, f *os.File, log *slog.Logger) {
	var slot **os.File
	switch {
	case name == fileControl:
		slot = &in.control
	case name == fileHandover:
		slot = &in.handover
	case strings.HasPrefix(name, prefixUDP):
		in.udp[strings.TrimPrefix(name, prefixUDP)] = f
		return
	case strings.HasPrefix(name, prefixTCP):
		in.tcp[strings.TrimPrefix(name, prefixTCP)] = f
		return
	default:
		log.Warn("ignoring an inherited file of unknown name", "name", name)
		f.Close()
		return
	}
	if *slot != nil {
		(*slot).Close() // the same socket twice (handover and systemd): keep the newer
	}
	*slot = f
}

func (in *inherited) closeRest() {
	for _, f := range []*os.File{in.control, in.handover} {
		if f != nil {
			f.Close()
		}
	}
	for _, m := range []map[string]*os.File{in.udp, in.tcp} {
		for _, f := range m {
			f.Close()
		}
	}
}

// service is the resolver as a long-lived service: the command's state
// besides the resolver.Server itself.
type service struct {
	f   *resolverFlags
	log *slog.Logger
	srv *resolver.Server
	ctl *control.Server // nil without --control

	controlL  *net.UnixListener
	handoverL *net.UnixListener
	// ctlSpare keeps the control socket while a handover is under way, to
	// serve it again if the successor fails.
	ctlSpare *os.File
	// handed is closed once the sockets are handed over and drained.
	handed   chan struct{}
	handOnce sync.Once
	// inStore is set once DNS sockets are in systemd's file descriptor
	// store: they outlive this process.
	inStore atomic.Bool
}

// takeSockets collects what systemd passed and, with --handover, what a
// running predecessor hands over. The successor handle is nil when there
// was no predecessor.
func takeSockets(ctx context.Context, f *resolverFlags, log *slog.Logger) (*inherited, *handover.Successor) {
	in := &inherited{udp: map[string]*os.File{}, tcp: map[string]*os.File{}}
	for _, sf := range sdnotify.Files() {
		in.add(sf.Name, sf.File, log)
	}
	if f.handover == "" || in.handover != nil {
		// Given the handover socket by systemd, this process is its only
		// owner: a connection to it would wait in its own backlog.
		return in, nil
	}
	hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	succ, files, err := handover.Take(hctx, f.handover, buildinfo.Get().Version)
	switch {
	case errors.Is(err, handover.ErrNoPredecessor):
		return in, nil
	case err != nil:
		log.Error("taking the sockets from the running resolver; binding them afresh", "err", err)
		return in, nil
	}
	log.Info("took the sockets of the running resolver", "files", len(files), "its_version", succ.Version)
	for _, hf := range files {
		in.add(hf.Name, hf.File, log)
	}
	return in, succ
}

// adoptListeners serves the inherited DNS sockets of the addresses wanted,
// and binds the wanted addresses nobody handed over. Sockets of addresses
// no longer wanted are closed (their old owner drains them). A static
// address that cannot be served is an error; an exposed one is left to the
// control server, which retries it.
func (s *service) adoptListeners(in *inherited, static []netip.AddrPort, exposed []netip.AddrPort) error {
	want := map[string]netip.AddrPort{}
	for _, a := range append(slices.Clone(static), exposed...) {
		want[fileName("", a)] = a
	}
	for key, u := range in.udp {
		t := in.tcp[key]
		delete(in.udp, key)
		delete(in.tcp, key)
		if _, ok := want[key]; !ok || t == nil {
			u.Close()
			if t != nil {
				t.Close()
			}
			continue
		}
		a, err := s.srv.ListenFiles(u, t)
		u.Close()
		t.Close()
		if err != nil {
			s.log.Error("serving an inherited socket; binding afresh", "name", key, "err", err)
		} else {
			s.log.Debug("serving an inherited socket", "addr", a)
		}
	}
	serving := map[netip.AddrPort]bool{}
	for _, a := range s.srv.Listeners() {
		serving[a] = true
	}
	for _, a := range static {
		if serving[a] {
			continue
		}
		if err := s.srv.Listen(a); err != nil {
			return err
		}
	}
	return nil
}

// openControl opens the control and handover sockets, inherited or anew.
func (s *service) openSockets(in *inherited) error {
	if s.f.control != "" {
		if in.control != nil {
			l, err := net.FileListener(in.control)
			in.control.Close()
			in.control = nil
			if err != nil {
				return fmt.Errorf("the inherited control socket: %w", err)
			}
			s.controlL = l.(*net.UnixListener)
			// The socket's file keeps the mode its creator gave it: an
			// older resolver's 0600 (as root) locks out the agent, root
			// without CAP_DAC_OVERRIDE, once systemd has handed the file
			// to this resolver's user. --control-mode holds.
			if err := os.Chmod(s.f.control, s.f.controlMode); err != nil {
				s.log.Warn("the inherited control socket's mode", "path", s.f.control, "mode", fmt.Sprintf("%04o", s.f.controlMode), "err", err)
			}
		} else {
			if err := os.MkdirAll(filepath.Dir(s.f.control), 0o755); err != nil {
				return fmt.Errorf("control socket: %w", err)
			}
			l, err := control.Listen(s.f.control, s.f.controlMode)
			if err != nil {
				return err
			}
			s.controlL = l
		}
	}
	if s.f.handover != "" {
		if in.handover != nil {
			l, err := net.FileListener(in.handover)
			in.handover.Close()
			in.handover = nil
			if err != nil {
				return fmt.Errorf("the inherited handover socket: %w", err)
			}
			s.handoverL = l.(*net.UnixListener)
		} else {
			if err := os.MkdirAll(filepath.Dir(s.f.handover), 0o755); err != nil {
				return fmt.Errorf("handover socket: %w", err)
			}
			l, err := handover.Listen(s.f.handover)
			if err != nil {
				return err
			}
			s.handoverL = l
		}
	}
	return nil
}

// storeAll puts every socket into systemd's file descriptor store (a no-op
// without systemd; the store drops what it holds already).
func (s *service) storeAll() {
	if !sdnotify.Enabled() {
		return
	}
	s.storeListeners(nil)
	for name, l := range map[string]*net.UnixListener{fileControl: s.controlL, fileHandover: s.handoverL} {
		if l == nil {
			continue
		}
		f, err := l.File()
		if err != nil {
			s.log.Warn("storing a socket with systemd", "name", name, "err", err)
			continue
		}
		if err := sdnotify.Store(name, f); err != nil {
			s.log.Warn("storing a socket with systemd", "name", name, "err", err)
		}
		f.Close()
	}
}

// storeListeners stores the sockets of the listeners at only (all of them
// when only is nil).
func (s *service) storeListeners(only []netip.AddrPort) {
	files, err := s.srv.Files()
	if err != nil {
		s.log.Warn("storing the listeners with systemd", "err", err)
		return
	}
	for _, lf := range files {
		if only == nil || slices.Contains(only, lf.Addr) {
			for _, x := range []struct {
				name string
				f    *os.File
			}{{fileName(prefixUDP, lf.Addr), lf.UDP}, {fileName(prefixTCP, lf.Addr), lf.TCP}} {
				if err := sdnotify.Store(x.name, x.f); err != nil {
					s.log.Warn("storing a socket with systemd", "name", x.name, "err", err)
				} else {
					s.inStore.Store(true)
				}
			}
		}
		lf.Close()
	}
}

// listenersChanged keeps systemd's store in step with the exposure.
func (s *service) listenersChanged(added, removed []netip.AddrPort) {
	if !sdnotify.Enabled() {
		return
	}
	if len(added) > 0 {
		s.storeListeners(added)
	}
	for _, a := range removed {
		for _, p := range []string{prefixUDP, prefixTCP} {
			if err := sdnotify.Remove(fileName(p, a)); err != nil {
				s.log.Warn("removing a socket from systemd's store", "addr", a, "err", err)
			}
		}
	}
}

// Prepare, Abort and Release are the handover.Source of the service.

func (s *service) Prepare(ctx context.Context) (_ []handover.File, err error) {
	// The successor writes the state directory from now on: no write of
	// this process's (a compaction under way included) may follow. A
	// Prepare that fails hands nothing over (and no Abort follows).
	s.srv.FreezeState()
	defer func() {
		if err != nil {
			s.srv.ThawState()
		}
	}()
	lfs, err := s.srv.Files()
	if err != nil {
		return nil, err
	}
	var out []handover.File
	for _, lf := range lfs {
		out = append(out,
			handover.File{Name: fileName(prefixUDP, lf.Addr), File: lf.UDP},
			handover.File{Name: fileName(prefixTCP, lf.Addr), File: lf.TCP})
	}
	closeOut := func() {
		for _, f := range out {
			f.File.Close()
		}
	}
	if s.handoverL != nil {
		f, err := s.handoverL.File()
		if err != nil {
			closeOut()
			return nil, err
		}
		out = append(out, handover.File{Name: fileHandover, File: f})
	}
	if s.controlL != nil {
		f, err := s.controlL.File()
		if err != nil {
			closeOut()
			return nil, err
		}
		spare, err := s.controlL.File()
		if err != nil {
			f.Close()
			closeOut()
			return nil, err
		}
		out = append(out, handover.File{Name: fileControl, File: f})
		// No roster or exposure may change once the successor has read
		// them: the control server stops, its requests in progress end.
		if s.ctl != nil {
			if err := s.ctl.Shutdown(ctx); err != nil {
				s.log.Warn("stopping the control server for the handover", "err", err)
			}
		}
		s.ctlSpare = spare
	}
	return out, nil
}

func (s *service) Abort() {
	s.srv.ThawState()
	if s.ctlSpare == nil {
		return
	}
	l, err := net.FileListener(s.ctlSpare)
	s.ctlSpare.Close()
	s.ctlSpare = nil
	if err != nil {
		s.log.Error("the control socket after a failed handover", "err", err)
		return
	}
	s.controlL = l.(*net.UnixListener)
	go func() {
		if err := s.ctl.Resume(l); err != nil {
			s.log.Error("control server", "err", err)
		}
	}()
}

func (s *service) Release(ctx context.Context) error {
	if s.ctlSpare != nil {
		s.ctlSpare.Close()
		s.ctlSpare = nil
	}
	// The successor reads the sockets already: what this process has not
	// answered in a moment, its clients ask again, of the successor.
	dctx, cancel := context.WithTimeout(ctx, drainHanded)
	defer cancel()
	err := s.srv.Drain(dctx)
	s.handOnce.Do(func() { close(s.handed) })
	return err
}

// readyPatience bounds the wait, before READY=1, for the addresses of this
// machine the resolver serves to answer its own query.
//
// READY=1 means that the resolver answers on its addresses, and as a rule
// it comes within milliseconds: the sockets are this process's, bound or
// inherited, and read. An address still silent after readyPatience has a
// fault that waiting does not mend (a firewall dropping the host's
// queries to itself, an interface going away), and waiting on would do
// harm: systemd would kill the resolver at TimeoutStartSec= and start it
// again, in a loop, taking DNS from the addresses that do answer, and
// podman (ordered after the resolver) would start no container meanwhile.
// So READY=1 comes then anyway: an error in the log and STATUS= (in
// `systemctl status`) name the silent addresses, and they are checked on
// in the background (watchSilent), which says when they answer.
const readyPatience = 10 * time.Second

// checkable returns the addresses of addrs that the resolver can ask
// itself: loopback and this machine's own. Addresses that are not assigned
// yet (a bridge gateway bound ahead with IP_FREEBIND) cannot be asked
// without the query leaving the machine, so they are not.
func checkable(addrs []netip.AddrPort) []netip.AddrPort {
	local := localAddrs()
	var out []netip.AddrPort
	for _, a := range addrs {
		if a.Addr().IsLoopback() || local[a.Addr()] {
			out = append(out, a)
		}
	}
	return out
}

// awaitAnswering waits until answer(a) holds for every address of addrs,
// for at most limit; it returns those for which it does not.
func awaitAnswering(ctx context.Context, addrs []netip.AddrPort, limit time.Duration, answer func(netip.AddrPort) bool) []netip.AddrPort {
	pending := slices.Clone(addrs)
	deadline := time.Now().Add(limit)
	for len(pending) > 0 && ctx.Err() == nil {
		pending = slices.DeleteFunc(pending, answer)
		if len(pending) == 0 || !time.Now().Before(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return pending
}

// readyStatus is the STATUS= the resolver reports: what it serves, and the
// addresses of this machine that do not answer its own query.
func readyStatus(generation uint64, addrs int, silent []netip.AddrPort) string {
	s := fmt.Sprintf("serving generation %d on %d addresses", generation, addrs)
	if len(silent) > 0 {
		s += fmt.Sprintf("; %d do not answer the resolver's own query: %v", len(silent), silent)
	}
	return s
}

// watchSilent asks the silent addresses again every second until each
// answers, or is no longer served (serving), or ctx ends; it logs those
// that answer and hands the new status to notify.
func watchSilent(ctx context.Context, log *slog.Logger, silent []netip.AddrPort, serving func() []netip.AddrPort,
	answer func(netip.AddrPort) bool, status func(silent []netip.AddrPort) string, notify func(string)) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for len(silent) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := serving()
		var answered []netip.AddrPort
		silent = slices.DeleteFunc(silent, func(a netip.AddrPort) bool {
			if !slices.Contains(now, a) {
				return true // no longer served: nothing to wait for
			}
			if answer(a) {
				answered = append(answered, a)
				return true
			}
			return false
		})
		if len(answered) > 0 {
			log.Info("addresses answer the resolver's own query now", "addrs", answered, "still_silent", silent)
		}
		if len(answered) > 0 || len(silent) == 0 {
			notify("STATUS=" + status(silent))
		}
	}
}

func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, ia := range ifas {
		if p, err := netip.ParsePrefix(ia.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}

// answers sends a STATUS query to a and reports whether a reply came back.
func answers(a netip.AddrPort, timeout time.Duration) bool {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(a))
	if err != nil {
		return false
	}
	defer c.Close()
	var q [12]byte
	rand.Read(q[:2])
	q[2] = 2 << 3 // opcode STATUS, no question
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write(q[:]); err != nil {
		return false
	}
	var buf [512]byte
	for {
		n, err := c.Read(buf[:])
		if err != nil {
			return false
		}
		if n >= 12 && binary.BigEndian.Uint16(buf[:2]) == binary.BigEndian.Uint16(q[:2]) && buf[2]&0x80 != 0 {
			return true
		}
	}
}
