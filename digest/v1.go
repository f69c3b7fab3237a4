package digest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/spec"
)

// docV1 is the v1 canonical document: the allow-list of create-time fields
// in a fixed order, each in a plain text form, omitted at its default. It is
// frozen: a change here changes every v1 digest, which the golden test
// catches. Add a v2 instead.
type docV1 struct {
	Name        string            `json:"name"`
	Image       string            `json:"image"`
	Command     []string          `json:"command,omitempty"`
	Entrypoint  []string          `json:"entrypoint,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	WorkingDir  string            `json:"working_dir,omitempty"`
	User        string            `json:"user,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Ports       []string          `json:"ports,omitempty"`    // "hostip:hostport:port/proto"
	Mounts      []string          `json:"mounts,omitempty"`   // "type:source:target[:ro]"
	Networks    []string          `json:"networks,omitempty"` // "name" [";alias=a,b"] [";ipv4=A"] [";ipv6=A"]
	Restart     string            `json:"restart,omitempty"`  // omitted when "no"
	StopSignal  string            `json:"stop_signal,omitempty"`
	StopTimeout int64             `json:"stop_timeout,omitempty"` // seconds; omitted when the default
	Healthcheck *healthV1         `json:"healthcheck,omitempty"`
	CapAdd      []string          `json:"cap_add,omitempty"`
	CapDrop     []string          `json:"cap_drop,omitempty"`
	Hosts       []string          `json:"hosts,omitempty"` // "name=addr", sorted
	DNS         *dnsV1            `json:"dns,omitempty"`
	// Resources are updated in place: they are in the record, never in the
	// digest.
	Resources *resourcesV1 `json:"resources,omitempty"`
}

type healthV1 struct {
	Test        []string `json:"test"`
	Interval    int64    `json:"interval_ms"`
	Timeout     int64    `json:"timeout_ms"`
	StartPeriod int64    `json:"start_period_ms,omitempty"`
	Retries     int      `json:"retries"`
}

type dnsV1 struct {
	Servers []string `json:"servers"`
	Search  []string `json:"search,omitempty"`
	Options []string `json:"options,omitempty"`
}

type resourcesV1 struct {
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	MilliCPUs   int64 `json:"millicpus,omitempty"`
	PidsLimit   int64 `json:"pids,omitempty"`
}

func toDocV1(r spec.Rendered) docV1 {
	d := docV1{
		Name: r.Name, Image: r.Image, Command: r.Command, Entrypoint: r.Entrypoint,
		Env: r.Env, WorkingDir: r.WorkingDir, User: r.User, Labels: userLabels(r.Labels),
		CapAdd: r.CapAdd, CapDrop: r.CapDrop,
	}
	for _, p := range r.Ports {
		host := ""
		if p.HostIP.IsValid() {
			host = p.HostIP.String()
		}
		d.Ports = append(d.Ports, fmt.Sprintf("%s:%d:%d/%s", host, p.HostPort, p.ContainerPort, p.Protocol))
	}
	for _, m := range r.Mounts {
		s := fmt.Sprintf("%s:%s:%s", m.Type, m.Source, m.Target)
		if m.ReadOnly {
			s += ":ro"
		}
		d.Mounts = append(d.Mounts, s)
	}
	for _, n := range r.Networks {
		s := n.Name
		if len(n.Aliases) > 0 {
			s += ";alias=" + strings.Join(n.Aliases, ",")
		}
		if n.IPv4.IsValid() {
			s += ";ipv4=" + n.IPv4.String()
		}
		if n.IPv6.IsValid() {
			s += ";ipv6=" + n.IPv6.String()
		}
		d.Networks = append(d.Networks, s)
	}
	if r.Restart.Name != "no" && r.Restart.Name != "" {
		d.Restart = r.Restart.String()
	}
	if r.StopSignal != spec.DefaultStopSignal {
		d.StopSignal = r.StopSignal
	}
	if r.StopTimeout != spec.DefaultStopTimeout {
		d.StopTimeout = int64(r.StopTimeout / time.Second)
	}
	if h := r.Healthcheck; h != nil {
		d.Healthcheck = &healthV1{h.Test, h.Interval.Milliseconds(), h.Timeout.Milliseconds(), h.StartPeriod.Milliseconds(), h.Retries}
	}
	for _, h := range r.Hosts {
		d.Hosts = append(d.Hosts, h.Name+"="+h.Addr.String())
	}
	if r.Mode == spec.Resolve {
		d.DNS = &dnsV1{Search: r.DNS.Search, Options: r.DNS.Options}
		for _, s := range r.DNS.Servers {
			d.DNS.Servers = append(d.DNS.Servers, s.String())
		}
	}
	if r.Resources != (spec.Resources{}) {
		d.Resources = &resourcesV1{r.Resources.MemoryBytes, r.Resources.MilliCPUs, r.Resources.PidsLimit}
	}
	return d
}

// userLabels drops meshhost's own labels: the digest cannot cover itself.
func userLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	maps.DeleteFunc(out, func(k, _ string) bool { return strings.HasPrefix(k, spec.LabelPrefix) })
	if len(out) == 0 {
		return nil
	}
	return out
}

func canonicalV1(r spec.Rendered) []byte {
	d := toDocV1(r)
	d.Resources = nil // updated in place, not a reason to replace
	b, err := json.Marshal(d)
	if err != nil {
		panic("digest: encoding v1 document: " + err.Error()) // only strings, ints and maps of strings
	}
	return b
}

// recordKeyLabel marks a record whose env and label values are keyed
// hashes (Key.sum) instead of values: its value is keyScheme and the key's
// id. It sits among the record's labels, where no record made before keyed
// records has one (userLabels drops meshhost's own), so that a record of
// either kind reads unambiguously, and a meshhost from before keyed records
// still reads a keyed one (it judges containers by their digest: a
// downgrade replaces nothing).
const recordKeyLabel = spec.LabelPrefix + "hash-key"

// keyScheme is the keyed hash recordKeyLabel names.
const keyScheme = "hmac-sha256:"

// recordV1 is the keyed v1 record, which meshhost wrote while v1 was
// Current; recordV2 is the same document under "v2:".
func recordV1(k *Key, r spec.Rendered) string { return "v1:" + keyedDocV1(k, r) }

func recordV2(k *Key, r spec.Rendered) string { return "v2:" + keyedDocV1(k, r) }

// parseRecordV2 reads a v2 record: a v1 document.
func parseRecordV2(label string) (parsed, error) {
	return parseDocV1(strings.TrimPrefix(label, "v2:"), "v2")
}

// keyedDocV1 is the v1 document of r with its env and label values replaced
// by their keyed hashes, and k named by recordKeyLabel.
func keyedDocV1(k *Key, r spec.Rendered) string {
	d := toDocV1(r)
	d.Env = k.sums(d.Env)
	d.Labels = k.sums(d.Labels)
	if d.Labels == nil {
		d.Labels = make(map[string]string, 1)
	}
	d.Labels[recordKeyLabel] = keyScheme + k.id
	b, err := json.Marshal(d)
	if err != nil {
		panic("digest: encoding v1 record: " + err.Error())
	}
	return string(b)
}

func parseRecordV1(label string) (parsed, error) {
	return parseDocV1(strings.TrimPrefix(label, "v1:"), "v1")
}

// parseDocV1 reads the v1 document of a record of version v.
func parseDocV1(doc, v string) (parsed, error) {
	var d docV1
	dec := json.NewDecoder(strings.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return parsed{}, fmt.Errorf("reading %s record: %w", v, err)
	}
	var key string
	if hk, ok := d.Labels[recordKeyLabel]; ok {
		id, ok := strings.CutPrefix(hk, keyScheme)
		if !ok || id == "" {
			return parsed{}, fmt.Errorf("reading %s record: its values are hashed with %q, which this meshhost does not know", v, hk)
		}
		key = id
		delete(d.Labels, recordKeyLabel)
		if len(d.Labels) == 0 {
			d.Labels = nil
		}
	}
	r := spec.Rendered{Mode: spec.Copy}
	r.Name, r.Image, r.Command, r.Entrypoint = d.Name, d.Image, d.Command, d.Entrypoint
	r.Env, r.WorkingDir, r.User, r.Labels = d.Env, d.WorkingDir, d.User, d.Labels
	r.CapAdd, r.CapDrop = d.CapAdd, d.CapDrop
	var errs []string
	for _, s := range d.Ports {
		var p spec.Port
		hostPort, rest, _ := strings.Cut(s, "/")
		i := strings.LastIndex(hostPort, ":")
		j := strings.LastIndex(hostPort[:max(i, 0)], ":")
		if i < 0 || j < 0 {
			errs = append(errs, "port "+s)
			continue
		}
		if h := hostPort[:j]; h != "" {
			p.HostIP, _ = netip.ParseAddr(h)
		}
		hp, _ := strconv.ParseUint(hostPort[j+1:i], 10, 16)
		cp, _ := strconv.ParseUint(hostPort[i+1:], 10, 16)
		p.HostPort, p.ContainerPort, p.Protocol = uint16(hp), uint16(cp), rest
		r.Ports = append(r.Ports, p)
	}
	for _, s := range d.Mounts {
		parts := strings.Split(s, ":")
		if len(parts) < 3 {
			errs = append(errs, "mount "+s)
			continue
		}
		r.Mounts = append(r.Mounts, spec.Mount{Type: spec.MountType(parts[0]), Source: parts[1], Target: parts[2], ReadOnly: len(parts) > 3 && parts[3] == "ro"})
	}
	for _, s := range d.Networks {
		parts := strings.Split(s, ";")
		n := spec.NetworkAttachment{Name: parts[0]}
		for _, kv := range parts[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "alias":
				n.Aliases = strings.Split(v, ",")
			case "ipv4":
				n.IPv4, _ = netip.ParseAddr(v)
			case "ipv6":
				n.IPv6, _ = netip.ParseAddr(v)
			}
		}
		r.Networks = append(r.Networks, n)
	}
	r.Restart = spec.RestartPolicy{Name: "no"}
	if d.Restart != "" {
		rp, err := spec.ParseRestartPolicy(d.Restart)
		if err != nil {
			errs = append(errs, err.Error())
		}
		r.Restart = rp
	}
	r.StopSignal = spec.CanonicalSignal(d.StopSignal)
	r.StopTimeout = spec.DefaultStopTimeout
	if d.StopTimeout != 0 {
		r.StopTimeout = time.Duration(d.StopTimeout) * time.Second
	}
	if h := d.Healthcheck; h != nil {
		r.Healthcheck = &spec.Healthcheck{Test: h.Test, Interval: time.Duration(h.Interval) * time.Millisecond,
			Timeout: time.Duration(h.Timeout) * time.Millisecond, StartPeriod: time.Duration(h.StartPeriod) * time.Millisecond, Retries: h.Retries}
	}
	for _, s := range d.Hosts {
		name, addr, _ := strings.Cut(s, "=")
		a, err := netip.ParseAddr(addr)
		if err != nil {
			errs = append(errs, "host "+s)
			continue
		}
		r.Hosts = append(r.Hosts, spec.HostEntry{Name: name, Addr: a})
	}
	if d.DNS != nil {
		r.Mode = spec.Resolve
		r.DNS.Search, r.DNS.Options = d.DNS.Search, d.DNS.Options
		for _, s := range d.DNS.Servers {
			a, err := netip.ParseAddr(s)
			if err != nil {
				errs = append(errs, "dns server "+s)
				continue
			}
			r.DNS.Servers = append(r.DNS.Servers, a)
		}
	}
	if res := d.Resources; res != nil {
		r.Resources = spec.Resources{MemoryBytes: res.MemoryBytes, MilliCPUs: res.MilliCPUs, PidsLimit: res.PidsLimit}
	}
	if len(errs) > 0 {
		return parsed{}, fmt.Errorf("reading %s record: malformed %s", v, strings.Join(errs, ", "))
	}
	return parsed{r: r, key: key}, nil
}
