// Package fakesystemd plays the service manager for tests: a notify socket
// that records what a service sends (READY=1, WATCHDOG=1, STOPPING=1, and
// FDSTORE=1 with its descriptors), and starts the service with the stored
// descriptors passed back (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID) as
// systemd does when it restarts a unit, after a crash or on request.
package fakesystemd

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Message is one notification, as received.
type Message struct {
	At     time.Time
	State  string // e.g. "READY=1\nSTATUS=..."
	NumFDs int
}

// Has reports whether the message assigns key=value.
func (m Message) Has(kv string) bool {
	return slices.Contains(strings.Split(m.State, "\n"), kv)
}

// Manager is the fake service manager.
type Manager struct {
	t    testing.TB
	path string
	conn *net.UnixConn
	done chan struct{}

	// mu guards the fields below.
	mu    sync.Mutex
	msgs  []Message
	store []stored
	wake  chan struct{} // closed and replaced at each message
}

type stored struct {
	name string
	f    *os.File
}

// New starts a Manager listening on a notify socket in a temporary
// directory; it stops when the test ends.
func New(t testing.TB) *Manager {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{t: t, path: path, conn: c, done: make(chan struct{}), wake: make(chan struct{})}
	go m.read()
	t.Cleanup(func() {
		c.Close()
		<-m.done
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, s := range m.store {
			s.f.Close()
		}
	})
	return m
}

// Socket is the NOTIFY_SOCKET path.
func (m *Manager) Socket() string { return m.path }

func (m *Manager) read() {
	defer close(m.done)
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(256*4))
	for {
		n, oobn, _, _, err := m.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		var files []*os.File
		if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, cm := range cmsgs {
				if fds, err := unix.ParseUnixRights(&cm); err == nil {
					for _, fd := range fds {
						files = append(files, os.NewFile(uintptr(fd), "stored"))
					}
				}
			}
		}
		msg := Message{At: time.Now(), State: string(buf[:n]), NumFDs: len(files)}
		m.mu.Lock()
		m.msgs = append(m.msgs, msg)
		name := ""
		for _, kv := range strings.Split(msg.State, "\n") {
			if v, ok := strings.CutPrefix(kv, "FDNAME="); ok {
				name = v
			}
		}
		switch {
		case msg.Has("FDSTORE=1"):
			// systemd drops a descriptor of a file it stores already.
			for _, f := range files {
				if slices.ContainsFunc(m.store, func(s stored) bool { return sameFile(s.f, f) }) {
					f.Close()
					continue
				}
				m.store = append(m.store, stored{name: name, f: f})
			}
			files = nil
		case msg.Has("FDSTOREREMOVE=1"):
			m.store = slices.DeleteFunc(m.store, func(s stored) bool {
				if s.name == name {
					s.f.Close()
					return true
				}
				return false
			})
		}
		for _, f := range files {
			f.Close()
		}
		close(m.wake)
		m.wake = make(chan struct{})
		m.mu.Unlock()
	}
}

func sameFile(a, b *os.File) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a.Fd()), &sa) != nil || unix.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// Messages returns every message received so far.
func (m *Manager) Messages() []Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.msgs)
}

// Wait waits until a message after index from assigns kv, and returns its
// index; it fails the test after timeout.
func (m *Manager) Wait(from int, kv string, timeout time.Duration) (int, Message) {
	m.t.Helper()
	deadline := time.After(timeout)
	for {
		m.mu.Lock()
		for i := from; i < len(m.msgs); i++ {
			if m.msgs[i].Has(kv) {
				msg := m.msgs[i]
				m.mu.Unlock()
				return i, msg
			}
		}
		wake := m.wake
		m.mu.Unlock()
		select {
		case <-wake:
		case <-deadline:
			m.t.Fatalf("no %s from the service within %v", kv, timeout)
		}
	}
}

// Stored returns the names of the stored descriptors, sorted.
func (m *Manager) Stored() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, s := range m.store {
		out = append(out, s.name)
	}
	slices.Sort(out)
	return out
}

// Clear closes every stored descriptor, as systemd does when a service is
// stopped for good (and as a reboot does).
func (m *Manager) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.store {
		s.f.Close()
	}
	m.store = nil
}

// Command returns a command running bin with args as the service: with
// NOTIFY_SOCKET, the extra environment env (WATCHDOG_USEC=..., say), and
// the stored descriptors passed as fds 3... with LISTEN_FDS and
// LISTEN_FDNAMES. LISTEN_PID must be the service's own pid, which is
// known only once it runs, so the command is a shell that sets it to its
// own pid and then becomes the service (exec keeps the pid), as systemd
// sets it between fork and exec.
func (m *Manager) Command(bin string, env []string, args ...string) *exec.Cmd {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	var files []*os.File
	for _, s := range m.store {
		names = append(names, s.name)
		files = append(files, s.f)
	}
	script := `exec "$0" "$@"`
	if len(files) > 0 {
		script = `LISTEN_PID=$$ exec "$0" "$@"`
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, bin}, args...)...)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+m.path)
	cmd.Env = append(cmd.Env, env...)
	if len(files) > 0 {
		cmd.Env = append(cmd.Env, "LISTEN_FDS="+strconv.Itoa(len(files)), "LISTEN_FDNAMES="+strings.Join(names, ":"))
		cmd.ExtraFiles = files
	}
	return cmd
}
