// Package sdnotify speaks systemd's service protocols for meshhost's
// long-running processes: it tells the service manager how the service is
// doing (READY=1, WATCHDOG=1, STOPPING=1, through go-systemd's daemon
// package), keeps the service's sockets in the manager's file descriptor
// store so that they outlive a restart or a crash (FDSTORE=1), and takes
// them back at start (LISTEN_FDS, through go-systemd's activation package).
//
// Every function does nothing, and returns nil, when the process does not
// run under a service manager (no NOTIFY_SOCKET, no LISTEN_FDS).
package sdnotify

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"
)

// The states a service sends.
const (
	Ready    = daemon.SdNotifyReady
	Stopping = daemon.SdNotifyStopping
	Watchdog = daemon.SdNotifyWatchdog
)

// Enabled reports whether a service manager listens (NOTIFY_SOCKET is set).
func Enabled() bool { return os.Getenv("NOTIFY_SOCKET") != "" }

// Notify sends state, one or more newline-separated assignments such as
// Ready or "STATUS=serving 3 addresses".
func Notify(state string) error {
	if _, err := daemon.SdNotify(false, state); err != nil {
		return fmt.Errorf("notifying the service manager (%q): %w", state, err)
	}
	return nil
}

// Store puts files into the service manager's file descriptor store under
// name (FDSTORE=1): the manager keeps a duplicate of each and passes them
// back at the service's next start (see Files), after a restart or a
// crash alike, until the service is stopped for good. The unit needs
// FileDescriptorStoreMax= at least the number of files stored. Storing a
// file already stored adds nothing (the manager drops duplicates).
//
// go-systemd's daemon package sends no descriptors, so this is the one
// message written here: the state and the descriptors in one datagram
// (SCM_RIGHTS), as sd_pid_notify_with_fds(3) sends it.
func Store(name string, files ...*os.File) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" || len(files) == 0 {
		return nil
	}
	// Unconnected: Go refuses WriteMsgUnix on a connected datagram socket.
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("storing %q with the service manager: %w", name, err)
	}
	defer c.Close()
	fds := make([]int, 0, len(files))
	for _, f := range files {
		// SyscallConn, not Fd: Fd would put the shared socket into
		// blocking mode, for this process's readers too.
		rc, err := f.SyscallConn()
		if err != nil {
			return fmt.Errorf("storing %q: %w", name, err)
		}
		rc.Control(func(fd uintptr) { fds = append(fds, int(fd)) })
	}
	_, _, err = c.WriteMsgUnix([]byte("FDSTORE=1\nFDNAME="+name), unix.UnixRights(fds...), &net.UnixAddr{Name: sock, Net: "unixgram"})
	runtime.KeepAlive(files)
	if err != nil {
		return fmt.Errorf("storing %q with the service manager: %w", name, err)
	}
	return nil
}

// Remove drops the files stored under name (FDSTOREREMOVE=1).
func Remove(name string) error {
	return Notify("FDSTOREREMOVE=1\nFDNAME=" + name)
}

// File is a descriptor passed at start, with the name it was stored or
// declared under.
type File struct {
	Name string
	*os.File
}

// Files returns the descriptors the service manager passed this process
// (LISTEN_FDS, LISTEN_FDNAMES), in order, and unsets those variables so
// that no child takes them for its own.
func Files() []File {
	var out []File
	for _, f := range activation.Files(true) {
		out = append(out, File{Name: f.Name(), File: f})
	}
	return out
}

// WatchdogLoop sends WATCHDOG=1 at a quarter of the interval the service
// manager set (WATCHDOG_USEC) for as long as alive returns nil, until ctx
// ends; without a watchdog it returns at once. Run it on its own
// goroutine, apart from any slow work: a roster swap or a reconcile pass
// must never hold the watchdog back, only a process that stopped working.
// A failed check is logged once and no ping is sent until it passes again,
// so the manager restarts a process that stays wedged.
func WatchdogLoop(ctx context.Context, log *slog.Logger, alive func() error) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("reading the watchdog interval", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	tick := time.NewTicker(interval / 4)
	defer tick.Stop()
	var failing error
	for {
		if err := alive(); err != nil {
			if failing == nil {
				log.Error("not alive: the watchdog is not fed, so the service manager restarts this process unless it recovers", "err", err)
			}
			failing = err
		} else {
			failing = nil
			if err := Notify(Watchdog); err != nil {
				log.Warn("feeding the watchdog", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
