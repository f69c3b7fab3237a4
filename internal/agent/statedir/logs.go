package statedir

import "path/filepath"

// Logs are the logs kept in the directory, relative to it: the files of
// package deltalog, and the journal's directories of segments, each kind
// one log. A damaged one is set aside (SetAside) and reported by this
// name (meshhost_state_corrupt_logs{log}).
func (d Dir) Logs() []string {
	return []string{
		filepath.Base(d.DeclarationLog()),
		filepath.Base(d.Roster()) + ".log", // resolver.LogPath
		filepath.Join(filepath.Base(d.Journal()), "declarations"),
		filepath.Join(filepath.Base(d.Journal()), "rosters"),
		filepath.Join(filepath.Base(d.Journal()), "passes"),
	}
}
