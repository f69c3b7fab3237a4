package journal

import (
	"time"
)

// PassEntry records what one reconcile pass did.
type PassEntry struct {
	Version    int           `json:"version"`
	Seq        uint64        `json:"seq"` // assigned by RecordPass
	Time       time.Time     `json:"time"`
	Generation uint64        `json:"generation,omitempty"` // the declaration applied, when known
	Duration   time.Duration `json:"duration_ns"`
	Deferred   int           `json:"deferred,omitempty"`
	Actions    []Action      `json:"actions"`
}

// Action is one action of a pass.
type Action struct {
	Kind      string        `json:"kind"`
	Container string        `json:"container"`
	Reason    string        `json:"reason,omitempty"`
	ID        string        `json:"id,omitempty"`
	NewID     string        `json:"new_id,omitempty"`
	Deferred  bool          `json:"deferred,omitempty"`
	Err       string        `json:"error,omitempty"`
	Duration  time.Duration `json:"duration_ns"`
}

// RecordPass records p, giving it the next sequence number, and returns it
// as stored.
func (j *Journal) RecordPass(p PassEntry) (PassEntry, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	p.Version, p.Seq = Version, j.nextSeq
	p.Time = p.Time.UTC()
	if err := j.writeLocked(passesDir, p.Seq, p); err != nil {
		return PassEntry{}, err
	}
	j.nextSeq++
	return p, nil
}

// Passes returns every pass entry held, oldest first.
func (j *Journal) Passes() ([]PassEntry, error) {
	return decodeAll[PassEntry](j, passesDir)
}
