package statedir

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// AgentRunning reports whether an agent holds the state directory (Lock),
// and its pid, without taking the lock (an agent starting at that moment
// would find it taken): it looks for a flock on AgentLock in /proc/locks.
func (d Dir) AgentRunning() (pid int, running bool, err error) {
	var st unix.Stat_t
	if err := unix.Stat(d.AgentLock(), &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, false, nil // no agent ever ran here
		}
		return 0, false, fmt.Errorf("is the agent running: %w", err)
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, false, fmt.Errorf("is the agent running: %w", err)
	}
	defer f.Close()
	// "1: FLOCK  ADVISORY  WRITE 1234 00:2a:123456 0 EOF"
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[5] != want {
			continue
		}
		pid, _ := strconv.Atoi(fields[4])
		return pid, true, nil
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("is the agent running: reading /proc/locks: %w", err)
	}
	return 0, false, nil
}
