// Package control is the resolver service's control protocol: how the host
// agent feeds meshhost-resolver, a process of its own that outlives the
// agent, the roster and the exposure the migration gate decides. It is
// HTTP with JSON bodies over a unix socket that only root, the resolver's
// own user and the users it names may use (SO_PEERCRED), so an operator
// can read it with curl:
//
//	curl --unix-socket /run/meshhost/resolver.sock http://resolver/v1/status
//
// The endpoints:
//
//	GET   /v1/status         Status: version, generation served, listeners, exposure, failures
//	GET   /v1/roster         the roster served, in the roster file format (404 before the first)
//	PUT   /v1/roster         a roster, generation-checked: 200, 409 not newer, 422 invalid,
//	                         500 served but not saved (the body says which generation is served)
//	PATCH /v1/roster         a roster delta (spec.RosterDelta's JSON: from, generation, set,
//	                         remove, zones): 200, 409 not newer or not from the generation
//	                         served ("conflict" says which), 422 invalid, 500 as PUT's
//	GET   /v1/exposure       the Exposure in force
//	PUT   /v1/exposure       the whole Exposure wanted (listen addresses, allowed client
//	                         networks, local forwards): 200 with what failed, if anything
//	GET   /v1/canary?nonce=N the address the resolver answers for the probe's canary name
//
// Both documents the resolver keeps are saved before the reply: the roster
// (never an older generation; the last good one is served from the
// resolver's first second after a restart) and the exposure (so that after
// a reboot the resolver listens on every address from its start, before
// the agent or podman are up). A roster change goes as a delta when it can
// (PATCH), so that a change of one name costs the resolver one name, not
// the roster; a delta applies only to the generation it was computed from.
// An exposure is a desired set, not a list of changes: putting the same
// one again changes nothing, which is how a restarted agent re-asserts it.
//
// Server is the resolver's side. Client is the agent's: it has the methods
// the agent uses on an in-process *resolver.Server (Update, Apply, Roster,
// Serving, Listen, Unlisten, Listeners, SetAllow, SetLocalForward), each of
// which puts the whole exposure it has been told, merged with what the
// resolver already held when the Client first reached it, until Settle.
package control
