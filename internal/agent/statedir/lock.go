package statedir

import (
	"errors"
	"os"
)

// AgentLock is the lock file the running agent holds (Lock).
func (d Dir) AgentLock() string { return d.join("agent.lock") }

// Lock is the agent's hold on its state directory (Dir.Lock).
type Lock struct{ f *os.File }

// ErrLocked is returned by Dir.Lock when another process holds the
// directory.
var ErrLocked = errors.New("the state directory is in use by another meshhost agent")

// Unlock lets another agent take the directory.
func (l *Lock) Unlock() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}
