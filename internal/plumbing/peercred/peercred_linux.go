package peercred

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// Of returns the peer of a unix socket connection.
func Of(c net.Conn) (Cred, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Cred{}, errors.New("not a unix socket connection")
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return Cred{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return Cred{}, err
	}
	if cerr != nil {
		return Cred{}, cerr
	}
	return Cred{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}
