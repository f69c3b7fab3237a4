package spec

import (
	"net/netip"
	"time"
)

// Container is one container a machine should run: every create-time setting
// an operator of the mesh uses. Whether a field can change on a running
// container is recorded once, in Fields.
type Container struct {
	Name        string
	Image       string
	Command     []string
	Entrypoint  []string
	Env         map[string]string
	WorkingDir  string
	User        string
	Labels      map[string]string
	Ports       []Port
	Mounts      []Mount
	Networks    []NetworkAttachment
	Restart     RestartPolicy
	StopSignal  string        // e.g. "SIGINT"; empty means DefaultStopSignal
	StopTimeout time.Duration // grace before SIGKILL; zero means DefaultStopTimeout
	Healthcheck *Healthcheck
	Resources   Resources
	CapAdd      []string
	CapDrop     []string
	// DependsOn names containers on the same machine that must be running
	// (and healthy, when they have a healthcheck) before this one starts.
	DependsOn []string
}

// Defaults applied by Render, so that an unset field and its default render,
// and digest, the same.
const (
	DefaultStopSignal  = "SIGTERM"
	DefaultStopTimeout = 10 * time.Second
	DefaultNetwork     = "podman"
	DefaultProtocol    = "tcp"
)

// HostNetwork is the network name that puts a container in the host's
// network namespace, as podman's `--network host` does: what a podman user
// writes, `"networks": [{"name": "host"}]`, means exactly that. Such a
// container has no network of its own, so it may name no other network and
// has no aliases, static addresses or published ports (it binds the host's
// ports itself). Podman refuses to create a network of this name, so no
// bridge network can be meant by it.
const HostNetwork = "host"

// OnHostNetwork reports whether c is in the host's network namespace
// (HostNetwork).
func (c Container) OnHostNetwork() bool {
	for _, n := range c.Networks {
		if n.Name == HostNetwork {
			return true
		}
	}
	return false
}

// networkModes are the other values of podman's --network that are not
// networks (podman refuses to create networks of these names, and reads
// them as modes): a declaration naming one as a network would pass
// parsing and then fail every pass with "unable to find network with name
// or ID". The value says what to write instead.
var networkModes = map[string]string{
	"bridge":      "omit networks for podman's default network, or name a network",
	"default":     "omit networks for podman's default network, or name a network",
	"private":     "omit networks for podman's default network, or name a network",
	"none":        "meshhost declares no container without a network; name a network, or \"host\"",
	"slirp4netns": "rootless networking is not what meshhost runs; name a network, or \"host\"",
	"pasta":       "rootless networking is not what meshhost runs; name a network, or \"host\"",
	"container":   "sharing another container's network is not supported; name a network, or \"host\"",
	"ns":          "joining a namespace by path is not supported; name a network, or \"host\"",
}

// AsideSuffix is appended to a container's name while the reconciler
// replaces it: the old container waits under NAME+AsideSuffix until its
// replacement runs, and a pass after a crash finds it there. A declared
// container's name may not end with it.
const AsideSuffix = ".meshhost-old"

// Port publishes a container port on the host.
type Port struct {
	HostIP        netip.Addr // zero: all addresses
	HostPort      uint16
	ContainerPort uint16
	Protocol      string // "tcp" (default), "udp" or "sctp"
}

// MountType is the kind of a Mount.
type MountType string

const (
	MountVolume MountType = "volume" // a named volume; never removed by meshhost
	MountBind   MountType = "bind"   // a host path
	MountTmpfs  MountType = "tmpfs"  // memory-backed, empty at each start
)

// Mount is a volume, bind or tmpfs mounted into the container.
type Mount struct {
	Type     MountType
	Source   string // volume name or host path; empty for tmpfs
	Target   string // absolute path in the container
	ReadOnly bool
}

// NetworkAttachment connects the container to a runtime network.
type NetworkAttachment struct {
	Name    string
	Aliases []string
	IPv4    netip.Addr // static address; zero: assigned by the runtime
	IPv6    netip.Addr
}

// RestartPolicy says what the runtime does when the container exits.
type RestartPolicy struct {
	Name       string // "no" (default), "always", "on-failure", "unless-stopped"
	MaxRetries int    // only with "on-failure"
}

// Healthcheck is a command the runtime runs to judge the container healthy.
type Healthcheck struct {
	Test        []string // exec form, e.g. ["pg_isready", "-U", "postgres"]
	Interval    time.Duration
	Timeout     time.Duration
	StartPeriod time.Duration
	Retries     int
}

// Resources limits what the container may use. Zero means unlimited.
type Resources struct {
	MemoryBytes int64
	MilliCPUs   int64 // 1000 = one CPU
	PidsLimit   int64
}

// Mutability says how a change to a field reaches a running container.
type Mutability string

const (
	// Replace: the runtime fixes the field at creation; a change replaces
	// the container.
	Replace Mutability = "replace"
	// UpdateInPlace: the runtime can change the field on a running container
	// (podman update), so a change never replaces it.
	UpdateInPlace Mutability = "update"
	// OrderOnly: not a runtime setting at all; it orders the reconciler's
	// actions and never touches a container.
	OrderOnly Mutability = "order"
)

// Fields records, for every Container field and every field Render adds,
// whether podman can change it on a running container. It is the one place
// this is decided: the digest covers exactly the Replace fields, and the
// reconciler updates UpdateInPlace fields without replacing.
//
// Podman 4.3 (Debian's) `podman update` changes resource limits only; restart
// policy and healthcheck updates came in podman 5 and are not relied on.
var Fields = []Field{
	{"name", Replace},
	{"image", Replace},
	{"command", Replace},
	{"entrypoint", Replace},
	{"env", Replace},
	{"working_dir", Replace},
	{"user", Replace},
	{"labels", Replace},
	{"ports", Replace},
	{"mounts", Replace},
	{"networks", Replace},
	{"restart", Replace},
	{"stop_signal", Replace},
	{"stop_timeout", Replace},
	{"healthcheck", Replace},
	{"resources", UpdateInPlace},
	{"cap_add", Replace},
	{"cap_drop", Replace},
	{"depends_on", OrderOnly},
	// Added by Render from the name mode.
	{"hosts", Replace},
	{"dns", Replace},
}

// SecretValues reports whether the values of the named field may hold
// secrets: a password set through the environment, a token in a label.
// Wherever meshhost shows a change to such a field (plan, explain, its
// log, the journal, history, metrics) it shows each key and a short keyed
// hash of its old and new value, never the value (digest.Change), and a
// container's record label holds keyed hashes too (digest.Key.Record).
func SecretValues(field string) bool { return field == "env" || field == "labels" }

// Field is a named setting and its Mutability.
type Field struct {
	Name       string
	Mutability Mutability
}

// MutabilityOf returns the Mutability of the named field, and false for a
// name Fields does not list.
func MutabilityOf(name string) (Mutability, bool) {
	for _, f := range Fields {
		if f.Name == name {
			return f.Mutability, true
		}
	}
	return "", false
}
