// Package sim is a deterministic simulation of one meshhost machine: the
// real agent (package agent with its declaration source, pass, roster
// guard, journal and state directory on disk), the embedded resolver and
// the reconciler over the in-memory runtime, driven from a seed through a
// schedule of inputs, operator controls and faults, with the machine's
// invariants checked after every step and after every runtime call.
//
// Determinism: a run draws everything from math/rand/v2 PCG sources
// seeded by its seed (one per step, so that a shrunk schedule draws its
// remaining steps alike), drives the agent itself (Agent.Pass, and
// Agent.RosterNow for Run's roster loop, whose interleaving with passes
// the Go scheduler would decide), runs the reconciler with Concurrency 1,
// fakes NATS's delivery (Source.PutRosterDelta and Source.Put), and runs under
// testing/synctest, so every clock the code reads is the bubble's fake
// clock (which starts at the same instant each run and moves only when the
// schedule sleeps). The wall clock of the gate and the reconciler (their
// Config.Now) can also be set back across a restart, which synctest's
// cannot. The resolver is asked in-process (resolver.Server.Answer), and
// its listeners, as the agent's Exposer opens them, are only recorded:
// no socket is opened. The same seed replays the same run, call by call.
//
// Glossary:
//   - step: one operation of the schedule (an input, a control, a fault, a
//     pass, a crash and restart, a clock jump), followed by the invariants.
//   - incarnation: one boot of the agent from the state directory; a crash
//     ends it, the runtime (the machine's podman) outlives it.
//   - offered: the highest declaration generation the schedule has offered;
//     good inputs go above it, stale ones below.
package sim
