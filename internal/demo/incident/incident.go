// Package incident builds the mesh of the incident meshhost exists to end:
// four machines, a hub (novox) running about 45 containers with the control
// plane's own store among them, and the operator actions that replaced every
// container on every machine when the roster was copied into containers.
//
// The demo and the simulation tests replay it; nothing here talks to a
// runtime.
package incident

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// Machines of the mesh, the hub first.
var Machines = []string{"novox", "ace", "g14", "shanks"}

// Zone is the mesh's own zone.
const Zone = "internal"

// service is one container of the simulated mesh.
type service struct {
	name      string
	image     string
	stopSig   string
	stopAfter time.Duration
	health    bool
	deps      []string
	volume    bool
}

// hub is what novox runs: the control plane's store, registry, edge proxy,
// mail, identity, git and the rest.
var hub = []service{
	{name: "postgres", image: "postgres:16", stopSig: "SIGINT", stopAfter: 2 * time.Minute, health: true, volume: true},
	{name: "controller", image: "mesh/controller:3.4", deps: []string{"postgres"}},
	{name: "registry", image: "registry:2", volume: true},
	{name: "caddy", image: "caddy:2.8", deps: []string{"controller"}},
	{name: "valkey", image: "valkey:8", health: true, volume: true},
	{name: "authentik-server", image: "authentik:2024.10", deps: []string{"postgres", "valkey"}},
	{name: "authentik-worker", image: "authentik:2024.10", deps: []string{"postgres", "valkey"}},
	{name: "stalwart-mail", image: "stalwart:0.10", volume: true},
	{name: "gitea", image: "gitea:1.22", deps: []string{"postgres"}, volume: true},
	{name: "gitea-runner", image: "act_runner:0.2", deps: []string{"gitea"}},
	{name: "vault", image: "openbao:2.0", volume: true},
	{name: "prometheus", image: "prometheus:2.55", volume: true},
	{name: "alertmanager", image: "alertmanager:0.27"},
	{name: "grafana", image: "grafana:11.3", deps: []string{"prometheus", "loki"}},
	{name: "loki", image: "loki:3.2", volume: true},
	{name: "promtail", image: "promtail:3.2", deps: []string{"loki"}},
	{name: "nextcloud", image: "nextcloud:30", deps: []string{"postgres", "valkey"}, volume: true},
	{name: "collabora", image: "collabora:24.04"},
	{name: "synapse", image: "synapse:1.119", deps: []string{"postgres"}, volume: true},
	{name: "element", image: "element:1.11"},
	{name: "vaultwarden", image: "vaultwarden:1.32", volume: true},
	{name: "uptime-kuma", image: "uptime-kuma:1.23"},
	{name: "minio", image: "minio:2024", volume: true},
	{name: "outline", image: "outline:0.81", deps: []string{"postgres", "minio"}},
	{name: "meilisearch", image: "meilisearch:1.11", volume: true},
	{name: "plausible", image: "plausible:2.1", deps: []string{"clickhouse", "postgres"}},
	{name: "clickhouse", image: "clickhouse:24.8", volume: true},
	{name: "n8n", image: "n8n:1.66", deps: []string{"postgres"}},
	{name: "mosquitto", image: "mosquitto:2.0"},
	{name: "paperless", image: "paperless-ngx:2.13", deps: []string{"postgres", "valkey", "tika", "gotenberg"}},
	{name: "tika", image: "tika:2.9"},
	{name: "gotenberg", image: "gotenberg:8"},
	{name: "freshrss", image: "freshrss:1.24"},
	{name: "hedgedoc", image: "hedgedoc:1.10", deps: []string{"postgres"}},
	{name: "excalidraw", image: "excalidraw:latest"},
	{name: "ntfy", image: "ntfy:2.11"},
	{name: "headscale", image: "headscale:0.23", volume: true},
	{name: "immich-server", image: "immich:1.120", deps: []string{"postgres", "valkey"}},
	{name: "immich-ml", image: "immich-ml:1.120"},
	{name: "jellyfin", image: "jellyfin:10.10", volume: true},
	{name: "home-assistant", image: "home-assistant:2024.11"},
	{name: "node-red", image: "node-red:4.0"},
	{name: "wiki", image: "wikijs:2.5", deps: []string{"postgres"}},
	{name: "backup", image: "restic:0.17", volume: true},
	{name: "docs", image: "nginx:1.27"},
}

// others is what each other machine runs.
var others = map[string][]service{
	"ace":    {{name: "caddy", image: "caddy:2.8"}, {name: "whoogle", image: "whoogle:0.9"}, {name: "libretranslate", image: "libretranslate:1.6"}, {name: "promtail", image: "promtail:3.2"}, {name: "node-exporter", image: "node-exporter:1.8"}, {name: "tor-relay", image: "tor:0.4"}},
	"g14":    {{name: "ollama", image: "ollama:0.4", volume: true}, {name: "open-webui", image: "open-webui:0.4", deps: []string{"ollama"}}, {name: "comfyui", image: "comfyui:latest"}, {name: "promtail", image: "promtail:3.2"}, {name: "node-exporter", image: "node-exporter:1.8"}},
	"shanks": {{name: "minio-replica", image: "minio:2024", volume: true}, {name: "postgres-replica", image: "postgres:16", stopSig: "SIGINT", stopAfter: 2 * time.Minute, volume: true}, {name: "promtail", image: "promtail:3.2"}, {name: "node-exporter", image: "node-exporter:1.8"}, {name: "backup-target", image: "restic-server:0.13", volume: true}},
}

// Mesh is the simulated mesh at one point of the replay.
type Mesh struct {
	// Generation counts pushes; every push gets the next one.
	Generation uint64
	// Domains are the public domains of machines ("" when unset).
	Domains map[string]string
	// Modules are modules assigned to machines: module name -> machine.
	Modules map[string]string
}

// New returns the mesh as it was before the incident.
func New() *Mesh {
	return &Mesh{Generation: 1, Domains: map[string]string{}, Modules: map[string]string{}}
}

// Action is one operator action of the replay; Do changes the mesh.
type Action struct {
	Name string
	Do   func(*Mesh)
}

// Actions are the operator actions of the incident, in order.
func Actions() []Action {
	return []Action{
		{"set ace's public domain to zurag.be", func(m *Mesh) { m.Domains["ace"] = "zurag.be" }},
		{"assign searxng to ace", func(m *Mesh) { m.Modules["searxng"] = "ace" }},
		{"unassign searxng", func(m *Mesh) { delete(m.Modules, "searxng") }},
		{"assign searxng to ace again", func(m *Mesh) { m.Modules["searxng"] = "ace" }},
	}
}

// Push applies an action and returns the declarations the controller sends,
// one per machine, with the next generation.
func (m *Mesh) Push(a Action, flag spec.MeshNamesFlag) map[string]*spec.Declaration {
	a.Do(m)
	m.Generation++
	return m.Declarations(flag)
}

// Declarations returns the current declaration of every machine.
func (m *Mesh) Declarations(flag spec.MeshNamesFlag) map[string]*spec.Declaration {
	roster := m.Roster()
	out := map[string]*spec.Declaration{}
	for _, machine := range Machines {
		out[machine] = &spec.Declaration{
			Schema: spec.SchemaVersion, Machine: machine, Generation: m.Generation,
			MeshNames: flag, Roster: roster, Containers: m.containers(machine),
		}
	}
	return out
}

func (m *Mesh) services(machine string) []service {
	var svcs []service
	if machine == "novox" {
		svcs = slices.Clone(hub)
	} else {
		svcs = slices.Clone(others[machine])
	}
	for _, module := range slices.Sorted(maps.Keys(m.Modules)) {
		if m.Modules[module] == machine {
			svcs = append(svcs, service{name: module, image: module + ":latest"})
		}
	}
	return svcs
}

func (m *Mesh) containers(machine string) []spec.Container {
	var cs []spec.Container
	for _, s := range m.services(machine) {
		c := spec.Container{
			Name: s.name, Image: "registry.novox.internal/" + s.image,
			Env:        map[string]string{"MESH_MACHINE": machine, "TZ": "Europe/Brussels"},
			Labels:     map[string]string{"mesh.module": s.name},
			Networks:   []spec.NetworkAttachment{{Name: "mesh", Aliases: []string{s.name}}},
			Restart:    spec.RestartPolicy{Name: "always"},
			StopSignal: s.stopSig, StopTimeout: s.stopAfter,
			DependsOn: s.deps,
		}
		if s.health {
			c.Healthcheck = &spec.Healthcheck{Test: []string{"/bin/true"}, Interval: 5 * time.Second}
		}
		if s.volume {
			c.Mounts = []spec.Mount{{Type: spec.MountVolume, Source: s.name + "-data", Target: "/data"}}
		}
		cs = append(cs, c)
	}
	return cs
}

// Roster returns the mesh's roster: every container's name on every machine,
// plus the routed public names of machines that have a public domain.
func (m *Mesh) Roster() *spec.Roster {
	r := &spec.Roster{Generation: m.Generation, Zones: []string{Zone}, Names: map[string][]netip.Addr{}}
	for mi, machine := range Machines {
		machineAddr := netip.AddrFrom4([4]byte{100, 64, 0, byte(mi + 1)})
		r.Names[fmt.Sprintf("%s.%s", machine, Zone)] = []netip.Addr{machineAddr}
		for si, s := range m.services(machine) {
			r.Names[fmt.Sprintf("%s.%s.%s", s.name, machine, Zone)] = []netip.Addr{netip.AddrFrom4([4]byte{10, 89, byte(mi), byte(si + 2)})}
		}
		if d := m.Domains[machine]; d != "" {
			r.Names[d] = []netip.Addr{machineAddr}
			for _, module := range slices.Sorted(maps.Keys(m.Modules)) {
				if m.Modules[module] == machine {
					r.Names[module+"."+d] = []netip.Addr{machineAddr}
				}
			}
		}
	}
	return r
}
