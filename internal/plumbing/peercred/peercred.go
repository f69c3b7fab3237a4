package peercred

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
)

// Cred is the peer of a unix socket connection.
type Cred struct {
	UID, GID uint32
	PID      int32
}

// Allow admits root, the process's own user and uids.
func Allow(uids ...uint32) func(uid uint32) bool {
	uids = slices.Clone(uids)
	self := os.Geteuid()
	return func(uid uint32) bool {
		return uid == 0 || int(uid) == self || slices.Contains(uids, uid)
	}
}

// Check returns an error naming the peer of c unless allowed admits it.
// what names the socket in the error ("the push endpoint").
func Check(c net.Conn, allowed func(uint32) bool, what string) (Cred, error) {
	cr, err := Of(c)
	if err != nil {
		return cr, fmt.Errorf("%s: reading the peer's credentials: %w", what, err)
	}
	if !allowed(cr.UID) {
		return cr, fmt.Errorf("%s: refusing uid %d (pid %d): only root, uid %d and the uids the operator names may use it", what, cr.UID, cr.PID, os.Geteuid())
	}
	return cr, nil
}

// Listener hands out only the connections whose peer allowed admits; the
// others are logged and hung up on.
type Listener struct {
	net.Listener
	Allowed func(uid uint32) bool
	// What names the socket in log lines ("push endpoint").
	What string
	Log  *slog.Logger
}

// Accept waits for the next connection whose peer is admitted.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cr, err := Check(c, l.Allowed, l.What)
		if err == nil {
			return c, nil
		}
		if l.Log != nil {
			l.Log.Warn("refused a connection", "socket", l.What, "uid", cr.UID, "pid", cr.PID, "err", err)
		}
		c.Close()
	}
}
