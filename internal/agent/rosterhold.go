package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/agent/statedir"
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
// fields are guarded by rosterInForce's mu.
type rosterHoldRecord struct {
	known   bool        // written is what the file holds (read once after a start)
	written *RosterHold // nil: no file
	errLog  string      // the last write error logged
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
