package spec

// Limits of a declaration and a roster. Every list and map a document can
// hold has one, so that a faulty or hostile controller cannot make every
// machine parse, validate, render, digest and journal an unbounded
// document (a 56 MB declaration with 700,000 environment entries in one
// container was once accepted). Validate refuses a document beyond them,
// naming the path and the limit:
//
//	containers[0].env: 700000 entries; at most 4096 per container
//
// They are far above what an operator of a large mesh declares by
// accident: a 100,000-name roster is a twentieth of MaxNames, and a
// machine of the incident's hub ran 45 containers. docs/formats.md lists them ("Limits").
const (
	// MaxDocumentBytes bounds a declaration or roster document, however it
	// arrives (a push, a watched file, the roster file, the saved state).
	// A 100,000-name roster is about 5 MB; MaxNames names fit in it.
	MaxDocumentBytes = 64 << 20

	// MaxContainers bounds the containers of one declaration (one machine):
	// ten times what a large machine runs, and what the plan and the pass
	// are measured at (BenchmarkPlan10000, BenchmarkPass10000).
	MaxContainers = 10000
	// MaxArgs bounds each of command, entrypoint and healthcheck.test.
	MaxArgs = 4096
	// MaxEnv bounds a container's environment entries.
	MaxEnv = 4096
	// MaxEnvBytes bounds a container's environment: the bytes of every
	// NAME=VALUE together. Linux fails an exec whose arguments and
	// environment pass a quarter of the stack limit (2 MiB by default).
	MaxEnvBytes = 1 << 20
	// MaxEnvEntryBytes bounds one NAME=VALUE: Linux's MAX_ARG_STRLEN
	// (32 pages, its terminating NUL included) fails any exec beyond it.
	MaxEnvEntryBytes = 32*4096 - 1
	// MaxLabels bounds a container's labels.
	MaxLabels = 1024
	// MaxLabelBytes bounds a container's labels: the bytes of every key and
	// value together.
	MaxLabelBytes = 256 << 10
	// MaxPorts bounds a container's published ports.
	MaxPorts = 4096
	// MaxMounts bounds a container's mounts.
	MaxMounts = 256
	// MaxNetworks bounds the networks a container is attached to.
	MaxNetworks = 64
	// MaxAliases bounds a container's aliases on one network.
	MaxAliases = 64
	// MaxCaps bounds each of cap_add and cap_drop (Linux has about 41
	// capabilities).
	MaxCaps = 64
	// MaxDependsOn bounds a container's depends_on.
	MaxDependsOn = MaxContainers

	// MaxNames bounds a roster's names.
	MaxNames = 1_000_000
)

// MaxAddrsPerName and MaxZones, the roster's other limits, are declared
// with Roster.
