//go:build unix

package statedir

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Lock takes the state directory for this process, for as long as it
// runs (or until Unlock): an exclusive flock on AgentLock, which then
// holds this process's pid. A second agent on the same directory gets
// ErrLocked, in an error that names the directory and the pid holding it,
// so that two agents never write the same state at once. The lock goes
// with the process, however it ends.
func (d Dir) Lock() (*Lock, error) {
	f, err := os.OpenFile(d.AgentLock(), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the state directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := "a process whose pid is not recorded"
			if b, _ := os.ReadFile(d.AgentLock()); len(b) > 0 {
				if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
					holder = "pid " + strconv.Itoa(pid)
				}
			}
			return nil, fmt.Errorf("%s (%s holds %s): stop it, or give this agent another --state: %w", d.path, holder, d.AgentLock(), ErrLocked)
		}
		return nil, fmt.Errorf("locking the state directory %s: %w", d.path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}
