// Package migrations moves a machine's containers from copied mesh names
// (spec.Copy) to lookup-time resolution through the embedded resolver
// (spec.Resolve), and only after a probe has proven, network by network,
// that a container there reaches the resolver.
//
// Three parts:
//
//   - A Runner probes each runtime network: it makes the resolver reachable
//     the way a strategy says (StrategyGateway: on the network's gateway;
//     StrategyNodeLocal: on a node-local address such as 169.254.53.53
//     assigned to the host's lo, with the network's aardvark-dns kept for
//     container names; StrategyLoopback: on a loopback address, for the
//     host's own network, HostNetwork, which podman does not list and
//     WithHost adds where a declared container is on it), then runs a short-lived container of the probe
//     image (cmd/meshprobe) on that network, configured exactly as a
//     resolve-mode container there would be, which must resolve a canary
//     name only this process's resolver can answer, a name outside the
//     mesh through the resolver's forwarding and, on a DNS-enabled network,
//     its own container name. Probe containers carry LabelProbe and
//     LabelProbeOwner; those an agent killed mid-probe leaves behind are
//     swept (SweepProbes) at the next start and before each probe round.
//     The Runner exposes the resolver through an Exposer, which the agent
//     shares: it serves the networks already in resolve mode even when no
//     Runner can be made, and takes the resolver back from networks gone.
//   - A Gate turns the machine's flag (spec.MeshNamesFlag) and the probe
//     results into each container's spec.Mode. It fails closed: a container
//     is in resolve mode only when every one of its networks is. Under
//     "auto" the machine switches once every network a declared container
//     uses has passed (Gate.Declare); networks none uses are probed and
//     reported, and hold nothing back. Its State
//     is saved atomically and survives restarts, so a restart never
//     migrates anything again.
//   - Status says, per container, whether the switch is done, pending or
//     failed, from what the runtime reports.
//
// The switch itself is the reconciler's: a changed mode changes a
// container's create-time settings, so it is replaced once, in dependency
// order, within the replacement budget.
package migrations
