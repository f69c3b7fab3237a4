// Package memory is an in-memory reconcile.Runtime: it models what the
// reconciler depends on in a real runtime (create-time settings fixed at
// creation, unique names, stop signal and timeout, health, start order,
// host ports and static addresses held by running containers) and
// adds what tests need (call counters, failure injection, an event log), for
// fast unit tests and for simulating machines with thousands of containers.
//
// It is never a substitute for the podman tests: it models podman's rules as
// meshhost understands them, not podman itself.
package memory
