// Package statedir is the agent's state directory. It names every file in
// it, so that no other code does: the agent, its commands and the libraries
// it feeds get paths from a Dir (the resolver its roster file, the migration
// gate its state file, the journal its directory), never a directory to
// name files in.
//
// Layout:
//
//	declaration.json  the declaration last applied (the agent's), as of when it was written whole
//	declaration.log   the declaration deltas applied since (package deltalog)
//	roster-accept     a roster generation the operator let shrink (meshhost roster accept)
//	roster-held       the roster generations the guard holds, while it holds one (what roster accept may release)
//	approved          a declaration generation the operator let past the blast-radius hold (meshhost approve)
//	frozen            present while the machine is frozen (meshhost freeze)
//	status.json       what the agent's last pass found: a declaration held, the freeze, its --hold-above
//	resolver          where the agent's resolver is, as its --resolver says: embedded, or unix:PATH
//	roster.json       the embedded resolver's last good roster (roster file format), as of when it was written whole
//	roster.json.log   the roster deltas it applied since (resolver.LogPath)
//	reconciler.json   the reconciler's replacement budget and adoptions
//	migrations.json   the migration gate's state (and migrations.json.lock, its lock)
//	journal/          the history: declarations, rosters that moved alone, and passes
//	push.sock         the controller's push endpoint, unless --push says otherwise
//	hash.key          the machine's key (0600) for the digest labels and the hashes of env and label values that records, plans and logs show
//	agent.lock        held (flock) by the running agent, with its pid: one agent a state directory
//	*.corrupt-TIME    a log damaged before its last record, set aside (package deltalog); also in journal/*/
package statedir

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Default is where the agent keeps its state unless told otherwise.
const Default = "/var/lib/meshhost"

// Dir is the agent's state directory. The zero Dir is the current
// directory.
type Dir struct{ path string }

// New returns the state directory at path. Nothing is created: see Create.
func New(path string) Dir { return Dir{path: path} }

// Create makes the directory (mode 0700) if it does not exist, and makes
// one that does the owner's alone: it holds declarations, env values
// included.
func (d Dir) Create() error {
	if err := os.MkdirAll(d.path, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	fi, err := os.Stat(d.path)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d.path, 0o700); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	return nil
}

// Path is the directory itself.
func (d Dir) Path() string { return d.path }

func (d Dir) join(name string) string { return filepath.Join(d.path, name) }

// Declaration is the declaration the agent last applied, saved before it
// acts on it.
func (d Dir) Declaration() string { return d.join("declaration.json") }

// DeclarationLog is the log of the declaration deltas applied since
// Declaration was written whole.
func (d Dir) DeclarationLog() string { return d.join("declaration.log") }

// RosterAccept holds a roster generation the operator let shrink past the
// roster guard.
func (d Dir) RosterAccept() string { return d.join("roster-accept") }

// RosterHeld holds the roster generations the guard holds (agent.RosterHold),
// present only while it holds one.
func (d Dir) RosterHeld() string { return d.join("roster-held") }

// Approved holds a declaration generation the operator let past the
// blast-radius hold.
func (d Dir) Approved() string { return d.join("approved") }

// Frozen exists while the machine is frozen: no container is created,
// replaced or removed.
func (d Dir) Frozen() string { return d.join("frozen") }

// Status is what the agent's last pass found, for `meshhost status` and
// `meshhost plan`.
func (d Dir) Status() string { return d.join("status.json") }

// Roster is the embedded resolver's last good roster
// (resolver.Config.StatePath). The resolver service (meshhost-resolver)
// keeps its own, in its own state directory.
func (d Dir) Roster() string { return d.join("roster.json") }

// Resolver says where the agent's resolver is, in the form of the agent's
// --resolver: "embedded" (its roster is Roster) or unix:PATH, the control
// socket of the resolver service. The agent writes it when it starts, so
// that the commands that need the roster in force (plan, explain,
// dns-check) read it where the agent does.
func (d Dir) Resolver() string { return d.join("resolver") }

// Reconciler keeps the reconciler's replacement budget and adoptions
// across restarts.
func (d Dir) Reconciler() string { return d.join("reconciler.json") }

// Migrations is the migration gate's state file
// (migrations.GateConfig.Path).
func (d Dir) Migrations() string { return d.join("migrations.json") }

// Journal is the journal's directory.
func (d Dir) Journal() string { return d.join("journal") }

// PushSocket is the controller's push endpoint by default.
func (d Dir) PushSocket() string { return d.join("push.sock") }

// SetAside lists the logs set aside because a record before their last one
// was damaged (deltalog's PATH.corrupt-TIME): in the directory and the
// journal's, sorted. They stay until the operator removes them.
func (d Dir) SetAside() ([]string, error) {
	var out []string
	for _, pattern := range []string{d.join("*.corrupt-*"), filepath.Join(d.Journal(), "*", "*.corrupt-*")} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			return nil, fmt.Errorf("listing set-aside logs in %s: %w", d.path, err)
		}
		out = append(out, m...)
	}
	slices.Sort(out)
	return out, nil
}
