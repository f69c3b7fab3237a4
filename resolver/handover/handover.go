// Package handover passes a running process's sockets to the process that
// replaces it, over a unix socket (SCM_RIGHTS), so that a resolver is
// upgraded or restarted without a moment where its addresses go unserved:
// the successor serves the very sockets its predecessor served (nothing
// queued in them is lost), both read them for an instant, and only then
// does the predecessor stop reading, answer what it had read, and exit.
//
// The exchange, on a SOCK_SEQPACKET socket whose peer must be, on both
// sides, the process's own user or root (SO_PEERCRED):
//
//	successor   -> {"op":"take","pid":P}
//	predecessor -> {"op":"files","names":[...],"more":true|false} + the descriptors, in chunks
//	successor   -> {"op":"serving"}            (or hangs up: the predecessor resumes)
//	predecessor -> {"op":"released"}           (it has drained; it exits)
//
// Under systemd the same sockets also sit in the service manager's file
// descriptor store (package internal/plumbing/sdnotify), which covers a crash; the
// handover covers a replacement where both processes run at once.
package handover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshhost/meshhost/internal/plumbing/peercred"
)

// File is a descriptor with the name it is handed over under.
type File struct {
	Name string
	File *os.File
}

// ErrNoPredecessor is returned by Take when no process offers its sockets
// at the path.
var ErrNoPredecessor = errors.New("no running process offers its sockets")

// chunk bounds the descriptors of one message (the kernel's SCM_MAX_FD is
// 253).
const chunk = 200

type message struct {
	Op      string   `json:"op"`
	PID     int      `json:"pid,omitempty"`
	Names   []string `json:"names,omitempty"`
	More    bool     `json:"more,omitempty"`
	Error   string   `json:"error,omitempty"`
	Version string   `json:"version,omitempty"`
}

// Source is the predecessor's side of a handover.
type Source interface {
	// Prepare stops what must never run in both processes at once (the
	// control server: the state it writes must be final before the
	// successor reads it) and returns the files to hand over, which
	// Serve closes once sent.
	Prepare(ctx context.Context) ([]File, error)
	// Abort undoes Prepare: the successor failed before it served.
	Abort()
	// Release runs once the successor serves: stop reading, answer what
	// was read, and close. Serve returns after it.
	Release(ctx context.Context) error
}

// Listen opens the handover socket at path, replacing a stale socket file
// (one nobody accepts on), and restricts it to its owner.
func Listen(path string) (*net.UnixListener, error) {
	if c, err := net.Dial("unixpacket", path); err == nil {
		c.Close()
		return nil, fmt.Errorf("handover socket %s: another process serves it", path)
	}
	os.Remove(path)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("handover socket: %w", err)
	}
	l.SetUnlinkOnClose(false) // the successor serves the same path
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("handover socket: %w", err)
	}
	return l, nil
}

// Serve offers src's files to each successor that connects to l, until one
// of them serves them (Serve then returns nil, after src.Release) or ctx
// ends. A successor that fails half-way makes src resume (src.Abort) and
// Serve wait for the next. l stays open: it is one of the files handed
// over, as a rule, so the successor offers the same path without a gap.
func Serve(ctx context.Context, l *net.UnixListener, src Source, version string, log *slog.Logger) error {
	stop := context.AfterFunc(ctx, func() { l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				l.SetDeadline(time.Time{})
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("handover socket: %w", err)
		}
		done, err := give(ctx, c, src, version, log)
		c.Close()
		if done {
			return err
		}
		if err != nil {
			log.Warn("handover failed; serving on", "err", err)
		}
	}
}

// give runs one exchange; done reports whether the successor took over.
func give(ctx context.Context, c *net.UnixConn, src Source, version string, log *slog.Logger) (done bool, err error) {
	if err := checkPeer(c); err != nil {
		return false, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var take message
	if _, err := recv(c, &take); err != nil || take.Op != "take" {
		return false, fmt.Errorf("reading the successor's request: %v (op %q)", err, take.Op)
	}
	log.Info("handing the sockets over", "successor_pid", take.PID, "successor_version", take.Version)
	files, err := src.Prepare(ctx)
	if err != nil {
		send(c, message{Op: "error", Error: err.Error()}, nil)
		return false, err
	}
	closeFiles := func() {
		for _, f := range files {
			f.File.Close()
		}
	}
	for i := 0; i == 0 || i < len(files); i += chunk {
		part := files[i:min(i+chunk, len(files))]
		m := message{Op: "files", More: i+chunk < len(files), Version: version}
		fs := make([]*os.File, len(part))
		for j, f := range part {
			m.Names = append(m.Names, f.Name)
			fs[j] = f.File
		}
		if err := send(c, m, fs); err != nil {
			closeFiles()
			src.Abort()
			return false, fmt.Errorf("sending the sockets: %w", err)
		}
	}
	closeFiles()
	// The successor needs time to load its roster before it serves.
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	var serving message
	if _, err := recv(c, &serving); err != nil || serving.Op != "serving" {
		src.Abort()
		return false, fmt.Errorf("the successor did not take over (%v, op %q); resuming", err, serving.Op)
	}
	log.Info("the successor serves; draining", "successor_pid", take.PID)
	err = src.Release(ctx)
	m := message{Op: "released"}
	if err != nil {
		m.Error = err.Error()
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	send(c, m, nil)
	return true, err
}

// checkPeer admits only this process's own user and root: whoever takes
// the sockets serves the machine's DNS, and whoever hands them over
// decides what the successor serves.
func checkPeer(c *net.UnixConn) error {
	_, err := peercred.Check(c, peercred.Allow(), "handover socket")
	return err
}

// Successor is the taking side of a handover in progress.
type Successor struct {
	c       *net.UnixConn
	Version string // the predecessor's version, as it told
}

// Take asks the process serving the handover socket at path for its
// sockets. It returns ErrNoPredecessor when there is none. The caller
// serves the files, then calls Serving; or Abort, and the predecessor
// goes on as before.
func Take(ctx context.Context, path, version string) (*Successor, []File, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return nil, nil, ErrNoPredecessor
		}
		return nil, nil, fmt.Errorf("handover socket %s: %w", path, err)
	}
	uc := c.(*net.UnixConn)
	if err := checkPeer(uc); err != nil {
		uc.Close()
		return nil, nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		uc.SetDeadline(dl)
	} else {
		uc.SetDeadline(time.Now().Add(30 * time.Second))
	}
	s := &Successor{c: uc}
	if err := send(uc, message{Op: "take", PID: os.Getpid(), Version: version}, nil); err != nil {
		uc.Close()
		return nil, nil, fmt.Errorf("asking for the sockets: %w", err)
	}
	var files []File
	fail := func(err error) (*Successor, []File, error) {
		for _, f := range files {
			f.File.Close()
		}
		uc.Close()
		return nil, nil, err
	}
	for {
		var m message
		fs, err := recv(uc, &m)
		if err != nil {
			return fail(fmt.Errorf("receiving the sockets: %w", err))
		}
		if m.Op == "error" {
			return fail(fmt.Errorf("the running process refused the handover: %s", m.Error))
		}
		if m.Op != "files" || len(fs) != len(m.Names) {
			for _, f := range fs {
				f.Close()
			}
			return fail(fmt.Errorf("unexpected handover message %q with %d names and %d descriptors", m.Op, len(m.Names), len(fs)))
		}
		for i, f := range fs {
			files = append(files, File{Name: m.Names[i], File: f})
		}
		s.Version = m.Version
		if !m.More {
			break
		}
	}
	uc.SetDeadline(time.Time{})
	return s, files, nil
}

// Serving tells the predecessor that this process serves the sockets now,
// and waits until it has drained what it had read (or ctx ends).
func (s *Successor) Serving(ctx context.Context) error {
	defer s.c.Close()
	stop := context.AfterFunc(ctx, func() { s.c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := send(s.c, message{Op: "serving", PID: os.Getpid()}, nil); err != nil {
		return fmt.Errorf("telling the predecessor: %w", err)
	}
	var m message
	if _, err := recv(s.c, &m); err != nil {
		return fmt.Errorf("waiting for the predecessor to drain: %w", err)
	}
	if m.Error != "" {
		return fmt.Errorf("the predecessor drained with an error: %s", m.Error)
	}
	return nil
}

// Abort hangs up: the predecessor resumes serving alone.
func (s *Successor) Abort() { s.c.Close() }

func send(c *net.UnixConn, m message, files []*os.File) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, 0, len(files))
		for _, f := range files {
			rc, err := f.SyscallConn() // not Fd: that would make the socket blocking
			if err != nil {
				return err
			}
			rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(data, oob, nil)
	runtime.KeepAlive(files)
	return err
}

func recv(c *net.UnixConn, m *message) ([]*os.File, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(chunk*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, fmt.Errorf("parsing the descriptors: %w", err)
		}
		for _, cm := range cmsgs {
			fds, err := unix.ParseUnixRights(&cm)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				// ReadMsgUnix asked for MSG_CMSG_CLOEXEC.
				files = append(files, os.NewFile(uintptr(fd), "handover"))
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		for _, f := range files {
			f.Close()
		}
		return nil, errors.New("handover message truncated")
	}
	if n == 0 {
		return files, errors.New("the peer hung up")
	}
	if err := json.Unmarshal(buf[:n], m); err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("handover message: %w", err)
	}
	return files, nil
}
