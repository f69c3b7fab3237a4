//go:build !linux

package statedir

import "errors"

// AgentRunning is not known where /proc/locks does not exist.
func (d Dir) AgentRunning() (pid int, running bool, err error) {
	return 0, false, errors.New("is the agent running: not known on this system")
}
