package spec

import (
	"encoding/json"
	"strconv"
	"time"
)

// The JSON writers below produce exactly the format that package specjson
// reads, so a declaration survives a round trip (examples, the journal, the
// demo).

type declarationDoc struct {
	Schema     int           `json:"schema"`
	Machine    string        `json:"machine"`
	Generation uint64        `json:"generation"`
	MeshNames  MeshNamesFlag `json:"mesh_names"`
	Roster     *Roster       `json:"roster"`
	Containers []Container   `json:"containers"`
}

// MarshalJSON writes d in the declaration format.
func (d *Declaration) MarshalJSON() ([]byte, error) {
	cs := d.Containers
	if cs == nil {
		cs = []Container{}
	}
	return json.Marshal(declarationDoc{d.Schema, d.Machine, d.Generation, d.MeshNames, d.Roster, cs})
}

type portDoc struct {
	HostIP        string `json:"host_ip,omitempty"`
	HostPort      uint16 `json:"host_port,omitempty"`
	ContainerPort uint16 `json:"container_port"`
	Protocol      string `json:"protocol,omitempty"`
}

type mountDoc struct {
	Type     MountType `json:"type"`
	Source   string    `json:"source,omitempty"`
	Target   string    `json:"target"`
	ReadOnly bool      `json:"read_only,omitempty"`
}

type networkDoc struct {
	Name    string   `json:"name"`
	Aliases []string `json:"aliases,omitempty"`
	IPv4    string   `json:"ipv4,omitempty"`
	IPv6    string   `json:"ipv6,omitempty"`
}

type healthDoc struct {
	Test        []string `json:"test"`
	Interval    string   `json:"interval,omitempty"`
	Timeout     string   `json:"timeout,omitempty"`
	StartPeriod string   `json:"start_period,omitempty"`
	Retries     int      `json:"retries,omitempty"`
}

type resourcesDoc struct {
	Memory string `json:"memory,omitempty"`
	CPUs   string `json:"cpus,omitempty"`
	Pids   int64  `json:"pids,omitempty"`
}

type containerDoc struct {
	Name        string            `json:"name"`
	Image       string            `json:"image"`
	Command     []string          `json:"command,omitempty"`
	Entrypoint  []string          `json:"entrypoint,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	WorkingDir  string            `json:"working_dir,omitempty"`
	User        string            `json:"user,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Ports       []portDoc         `json:"ports,omitempty"`
	Mounts      []mountDoc        `json:"mounts,omitempty"`
	Networks    []networkDoc      `json:"networks,omitempty"`
	Restart     string            `json:"restart,omitempty"`
	StopSignal  string            `json:"stop_signal,omitempty"`
	StopTimeout string            `json:"stop_timeout,omitempty"`
	Healthcheck *healthDoc        `json:"healthcheck,omitempty"`
	Resources   *resourcesDoc     `json:"resources,omitempty"`
	CapAdd      []string          `json:"cap_add,omitempty"`
	CapDrop     []string          `json:"cap_drop,omitempty"`
	DependsOn   []string          `json:"depends_on,omitempty"`
}

func durationText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func addrText(a interface {
	IsValid() bool
	String() string
}) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// MarshalJSON writes c as a container of the declaration format.
func (c Container) MarshalJSON() ([]byte, error) {
	doc := containerDoc{
		Name: c.Name, Image: c.Image, Command: c.Command, Entrypoint: c.Entrypoint,
		Env: c.Env, WorkingDir: c.WorkingDir, User: c.User, Labels: c.Labels,
		Restart: c.Restart.String(), StopSignal: c.StopSignal, StopTimeout: durationText(c.StopTimeout),
		CapAdd: c.CapAdd, CapDrop: c.CapDrop, DependsOn: c.DependsOn,
	}
	for _, p := range c.Ports {
		doc.Ports = append(doc.Ports, portDoc{addrText(p.HostIP), p.HostPort, p.ContainerPort, p.Protocol})
	}
	for _, m := range c.Mounts {
		doc.Mounts = append(doc.Mounts, mountDoc(m))
	}
	for _, n := range c.Networks {
		doc.Networks = append(doc.Networks, networkDoc{n.Name, n.Aliases, addrText(n.IPv4), addrText(n.IPv6)})
	}
	if h := c.Healthcheck; h != nil {
		doc.Healthcheck = &healthDoc{h.Test, durationText(h.Interval), durationText(h.Timeout), durationText(h.StartPeriod), h.Retries}
	}
	if r := c.Resources; r != (Resources{}) {
		doc.Resources = &resourcesDoc{Pids: r.PidsLimit}
		if r.MemoryBytes != 0 {
			doc.Resources.Memory = strconv.FormatInt(r.MemoryBytes, 10)
		}
		if r.MilliCPUs != 0 {
			doc.Resources.CPUs = strconv.FormatFloat(float64(r.MilliCPUs)/1000, 'f', -1, 64)
		}
	}
	return json.Marshal(doc)
}

// MarshalJSON writes r in the roster file format specjson.ParseRoster reads.
func (r *Roster) MarshalJSON() ([]byte, error) {
	names := make(map[string][]string, len(r.Names))
	for n, addrs := range r.Names {
		s := make([]string, len(addrs))
		for i, a := range addrs {
			s[i] = a.String()
		}
		names[n] = s
	}
	zones := r.Zones
	if zones == nil {
		zones = []string{}
	}
	return json.Marshal(struct {
		Generation uint64              `json:"generation"`
		Zones      []string            `json:"zones"`
		Names      map[string][]string `json:"names"`
	}{r.Generation, zones, names})
}
