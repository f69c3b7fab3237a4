package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/plumbing/syncs"
)

// RosterHold is what the roster guard holds, as the agent records it in
// the state directory (statedir.Dir.RosterHeld) for meshhost roster
// accept: the declared change from roster generation Served to Newest.
// It is written only when the hold begins or its newest generation
// moves, and removed when the hold ends, so a roster change that is not
// held writes no file.
type RosterHold struct {
	Served uint64 `json:"served"`
	Newest uint64 `json:"newest"`
}

// rosterHoldRecord keeps the roster-held file in step with the guard. Its
// fields are guarded by the Agent's rosterMu.
type rosterHoldRecord struct {
	known   bool        // written is what the file holds (read once after a start)
	written *RosterHold // nil: no file
	errLog  string      // the last write error logged
}

// recordRosterHoldLocked writes h (nil: no hold) when it differs from the
// file; a.rosterMu must be held. A failure is logged when it changes: the file informs the
// operator's command, the guard decides from the roster itself.
func (a *Agent) recordRosterHoldLocked(h *RosterHold) {
	syncs.AssertLocked(&a.rosterMu)
	r := &a.rosterHold
	if !r.known {
		r.written, _ = LoadRosterHold(a.cfg.State)
		r.known = true
	}
	if (h == nil && r.written == nil) || (h != nil && r.written != nil && *h == *r.written) {
		return
	}
	var err error
	if h == nil {
		if err = os.Remove(a.cfg.State.RosterHeld()); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	} else {
		data, _ := json.Marshal(h)
		err = writeAtomic(a.cfg.State.RosterHeld(), append(data, '\n'))
	}
	if err != nil {
		if err.Error() != r.errLog {
			a.log.Warn("recording the held roster for meshhost roster accept", "err", err)
		}
		r.errLog = err.Error()
		return
	}
	r.written, r.errLog = h, ""
}

// LoadRosterHold returns the roster the agent holds, nil when none.
func LoadRosterHold(dir statedir.Dir) (*RosterHold, error) {
	data, err := os.ReadFile(dir.RosterHeld())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var h RosterHold
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir.RosterHeld(), err)
	}
	return &h, nil
}

// AcceptRoster lets roster generation gen shrink past the guard. Only a
// generation the guard holds may be accepted (pass.AcceptCovers, the rule
// the pass releases by; admit.AcceptRoster decides): an accept of any other would release nothing
// now, and could let a future shrink of that generation through unseen.
func AcceptRoster(dir statedir.Dir, gen uint64) error {
	h, err := LoadRosterHold(dir)
	if err != nil {
		return err
	}
	var served, newest uint64
	if h != nil {
		served, newest = h.Served, h.Newest
	}
	if err := admit.AcceptRoster(gen, h != nil, served, newest).Err(); err != nil {
		return err
	}
	return writeAtomic(dir.RosterAccept(), []byte(strconv.FormatUint(gen, 10)+"\n"))
}
