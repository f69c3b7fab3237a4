package agent

// RosterNow does what Run's roster loop does when the Source takes a
// declaration: saves it and puts its roster in force, without a pass. For
// a driver that runs passes itself instead of Run (the deterministic
// simulation, internal/testkit/sim), so that the loop's step happens at a
// point of its schedule rather than where the Go scheduler puts it.
func (a *Agent) RosterNow() error { return a.rosterNow() }
