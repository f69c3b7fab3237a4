package spec

import (
	"fmt"
	"math"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
)

// LabelPrefix is reserved for meshhost's own labels; declarations may not use it.
const LabelPrefix = "io.meshhost."

func readContainer(rep *strictjson.Report, p string, v strictjson.Value) Container {
	o := rep.Object(p, v)
	var c Container
	str := func(key string, dst *string) {
		if fv, fp, ok := o.Field(key); ok {
			*dst, _ = rep.String(fp, fv)
		}
	}
	strs := func(key string, dst *[]string) {
		if fv, fp, ok := o.Field(key); ok {
			*dst, _ = rep.Strings(fp, fv)
		}
	}
	dur := func(key string, dst *time.Duration) {
		if fv, fp, ok := o.Field(key); ok {
			*dst = readDuration(rep, fp, fv)
		}
	}
	if fv, fp, ok := o.Required("name"); ok {
		c.Name, _ = rep.String(fp, fv)
	}
	if fv, fp, ok := o.Required("image"); ok {
		c.Image, _ = rep.String(fp, fv)
	}
	strs("command", &c.Command)
	strs("entrypoint", &c.Entrypoint)
	if fv, fp, ok := o.Field("env"); ok {
		c.Env = readStringMap(rep, fp, fv)
	}
	str("working_dir", &c.WorkingDir)
	str("user", &c.User)
	if fv, fp, ok := o.Field("labels"); ok {
		c.Labels = readStringMap(rep, fp, fv)
	}
	if fv, fp, ok := o.Field("ports"); ok {
		items, _ := rep.Array(fp, fv)
		for i, item := range items {
			c.Ports = append(c.Ports, readPort(rep, strictjson.Index(fp, i), item))
		}
	}
	if fv, fp, ok := o.Field("mounts"); ok {
		items, _ := rep.Array(fp, fv)
		for i, item := range items {
			c.Mounts = append(c.Mounts, readMount(rep, strictjson.Index(fp, i), item))
		}
	}
	if fv, fp, ok := o.Field("networks"); ok {
		items, _ := rep.Array(fp, fv)
		for i, item := range items {
			c.Networks = append(c.Networks, readNetwork(rep, strictjson.Index(fp, i), item))
		}
	}
	if fv, fp, ok := o.Field("restart"); ok {
		if s, ok := rep.String(fp, fv); ok {
			rp, err := ParseRestartPolicy(s)
			if err != nil {
				rep.Add(fp, "%v", err)
			}
			c.Restart = rp
		}
	}
	str("stop_signal", &c.StopSignal)
	dur("stop_timeout", &c.StopTimeout)
	if fv, fp, ok := o.Field("healthcheck"); ok {
		h := readHealthcheck(rep, fp, fv)
		c.Healthcheck = &h
	}
	if fv, fp, ok := o.Field("resources"); ok {
		c.Resources = readResources(rep, fp, fv)
	}
	strs("cap_add", &c.CapAdd)
	strs("cap_drop", &c.CapDrop)
	strs("depends_on", &c.DependsOn)
	o.Done()
	return c
}

func readStringMap(rep *strictjson.Report, p string, v strictjson.Value) map[string]string {
	o := rep.Object(p, v)
	m := map[string]string{}
	for _, mem := range o.Members() {
		if s, ok := rep.String(strictjson.Join(p, mem.Key), mem.Value); ok {
			m[mem.Key] = s
		}
	}
	return m
}

func readDuration(rep *strictjson.Report, p string, v strictjson.Value) time.Duration {
	s, ok := rep.String(p, v)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		rep.Add(p, "%q is not a duration (write e.g. \"30s\" or \"2m\")", s)
		return 0
	}
	if d < 0 {
		rep.Add(p, "%q is negative", s)
	}
	return d
}

func readPort(rep *strictjson.Report, p string, v strictjson.Value) Port {
	o := rep.Object(p, v)
	var port Port
	if fv, fp, ok := o.Field("host_ip"); ok {
		if s, ok := rep.String(fp, fv); ok && s != "" {
			a, err := netip.ParseAddr(s)
			if err != nil {
				rep.Add(fp, "%q is not an IP address", s)
			}
			port.HostIP = a
		}
	}
	if fv, fp, ok := o.Field("host_port"); ok {
		n, _ := rep.Int(fp, fv, 0, math.MaxUint16)
		port.HostPort = uint16(n)
	}
	if fv, fp, ok := o.Required("container_port"); ok {
		n, _ := rep.Int(fp, fv, 1, math.MaxUint16)
		port.ContainerPort = uint16(n)
	}
	if fv, fp, ok := o.Field("protocol"); ok {
		port.Protocol, _ = rep.String(fp, fv)
	}
	o.Done()
	return port
}

func readMount(rep *strictjson.Report, p string, v strictjson.Value) Mount {
	o := rep.Object(p, v)
	var m Mount
	if fv, fp, ok := o.Required("type"); ok {
		s, _ := rep.String(fp, fv)
		m.Type = MountType(s)
	}
	if fv, fp, ok := o.Field("source"); ok {
		m.Source, _ = rep.String(fp, fv)
	}
	if fv, fp, ok := o.Required("target"); ok {
		m.Target, _ = rep.String(fp, fv)
	}
	if fv, fp, ok := o.Field("read_only"); ok {
		m.ReadOnly, _ = rep.Bool(fp, fv)
	}
	o.Done()
	return m
}

func readNetwork(rep *strictjson.Report, p string, v strictjson.Value) NetworkAttachment {
	o := rep.Object(p, v)
	var n NetworkAttachment
	if fv, fp, ok := o.Required("name"); ok {
		n.Name, _ = rep.String(fp, fv)
	}
	if fv, fp, ok := o.Field("aliases"); ok {
		n.Aliases, _ = rep.Strings(fp, fv)
	}
	addr := func(key string, want func(netip.Addr) bool, kind string) netip.Addr {
		fv, fp, ok := o.Field(key)
		if !ok {
			return netip.Addr{}
		}
		s, ok := rep.String(fp, fv)
		if !ok || s == "" {
			return netip.Addr{}
		}
		a, err := netip.ParseAddr(s)
		if err != nil || !want(a) {
			rep.Add(fp, "%q is not an %s address", s, kind)
		}
		return a
	}
	n.IPv4 = addr("ipv4", netip.Addr.Is4, "IPv4")
	n.IPv6 = addr("ipv6", func(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }, "IPv6")
	o.Done()
	return n
}

func readHealthcheck(rep *strictjson.Report, p string, v strictjson.Value) Healthcheck {
	o := rep.Object(p, v)
	var h Healthcheck
	if fv, fp, ok := o.Required("test"); ok {
		h.Test, _ = rep.Strings(fp, fv)
	}
	for _, f := range []struct {
		key string
		dst *time.Duration
	}{{"interval", &h.Interval}, {"timeout", &h.Timeout}, {"start_period", &h.StartPeriod}} {
		if fv, fp, ok := o.Field(f.key); ok {
			*f.dst = readDuration(rep, fp, fv)
		}
	}
	if fv, fp, ok := o.Field("retries"); ok {
		n, _ := rep.Int(fp, fv, 0, 1000)
		h.Retries = int(n)
	}
	o.Done()
	return h
}

func readResources(rep *strictjson.Report, p string, v strictjson.Value) Resources {
	o := rep.Object(p, v)
	var r Resources
	if fv, fp, ok := o.Field("memory"); ok {
		if s, ok := rep.String(fp, fv); ok {
			n, err := ParseBytes(s)
			if err != nil {
				rep.Add(fp, "%v", err)
			}
			r.MemoryBytes = n
		}
	}
	if fv, fp, ok := o.Field("cpus"); ok {
		if s, ok := rep.String(fp, fv); ok {
			f, err := strconv.ParseFloat(s, 64)
			if err != nil || f < 0 || f > 1e6 || math.IsNaN(f) {
				rep.Add(fp, "%q is not a number of CPUs (write e.g. \"1.5\")", s)
			} else {
				r.MilliCPUs = int64(math.Round(f * 1000))
			}
		}
	}
	if fv, fp, ok := o.Field("pids"); ok {
		r.PidsLimit, _ = rep.Int(fp, fv, 0, 1<<31)
	}
	o.Done()
	return r
}

// ParseBytes reads a memory size: a number of bytes with an optional binary
// suffix, as docker and podman do: "1073741824", "512m", "1g", "64Mi".
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "i")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k':
			mult, t = 1<<10, t[:n-1]
		case 'm':
			mult, t = 1<<20, t[:n-1]
		case 'g':
			mult, t = 1<<30, t[:n-1]
		case 't':
			mult, t = 1<<40, t[:n-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a memory size (write e.g. \"512m\" or \"1g\")", s)
	}
	return n * mult, nil
}

// ParseRestartPolicy reads "no", "always", "unless-stopped", "on-failure"
// or "on-failure:N".
func ParseRestartPolicy(s string) (RestartPolicy, error) {
	name, retries, hasRetries := strings.Cut(s, ":")
	switch name {
	case "no", "always", "unless-stopped":
		if !hasRetries {
			return RestartPolicy{Name: name}, nil
		}
	case "on-failure":
		if !hasRetries {
			return RestartPolicy{Name: name}, nil
		}
		n, err := strconv.Atoi(retries)
		if err == nil && n >= 0 {
			return RestartPolicy{Name: name, MaxRetries: n}, nil
		}
	}
	return RestartPolicy{}, fmt.Errorf("%q is not a restart policy; want no, always, unless-stopped, on-failure or on-failure:N", s)
}

// String spells the policy as ParseRestartPolicy reads it.
func (r RestartPolicy) String() string {
	if r.Name == "on-failure" && r.MaxRetries > 0 {
		return r.Name + ":" + strconv.Itoa(r.MaxRetries)
	}
	return r.Name
}

var (
	// containerNameRE is podman's own rule for container names.
	containerNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,252}$`)
	networkNameRE   = containerNameRE
	volumeNameRE    = containerNameRE
	capRE           = regexp.MustCompile(`^(?i)(CAP_)?[A-Z_]+$`)
)

var signals = map[string]bool{
	"SIGHUP": true, "SIGINT": true, "SIGQUIT": true, "SIGKILL": true, "SIGUSR1": true,
	"SIGUSR2": true, "SIGTERM": true, "SIGWINCH": true, "SIGPWR": true, "SIGSTOP": true,
}

func validateContainer(errs *fieldErrors, p string, c Container) {
	if !containerNameRE.MatchString(c.Name) {
		errs.add(p+".name", "%q is not a container name (letters, digits, and _ . - after the first)", c.Name)
	}
	if c.Image == "" || strings.ContainsAny(c.Image, " \t\r\n") {
		errs.add(p+".image", "%q is not an image reference", c.Image)
	}
	for k, v := range c.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			errs.add(strictjson.Join(p+".env", k), "an environment variable name may not be empty or hold '=' or NUL")
		}
	}
	for k := range c.Labels {
		switch {
		case k == "":
			errs.add(p+".labels", "a label key may not be empty")
		case strings.HasPrefix(k, LabelPrefix):
			errs.add(strictjson.Join(p+".labels", k), "labels under %q are meshhost's own; use another key", LabelPrefix)
		}
	}
	for i, port := range c.Ports {
		pp := fmt.Sprintf("%s.ports[%d]", p, i)
		switch port.Protocol {
		case "", "tcp", "udp", "sctp":
		default:
			errs.add(pp+".protocol", "%q is not tcp, udp or sctp", port.Protocol)
		}
		if port.ContainerPort == 0 {
			errs.add(pp+".container_port", "must be 1 to 65535")
		}
		for j := range i {
			q := c.Ports[j]
			if port.HostPort != 0 && port.HostPort == q.HostPort && port.HostIP == q.HostIP && normProto(port.Protocol) == normProto(q.Protocol) {
				errs.add(pp+".host_port", "%d/%s is also published by ports[%d]", port.HostPort, normProto(port.Protocol), j)
			}
		}
	}
	targets := map[string]int{}
	for i, m := range c.Mounts {
		mp := fmt.Sprintf("%s.mounts[%d]", p, i)
		switch m.Type {
		case MountVolume:
			if !volumeNameRE.MatchString(m.Source) {
				errs.add(mp+".source", "%q is not a volume name", m.Source)
			}
		case MountBind:
			if !path.IsAbs(m.Source) {
				errs.add(mp+".source", "%q is not an absolute host path", m.Source)
			}
		case MountTmpfs:
			if m.Source != "" {
				errs.add(mp+".source", "a tmpfs mount has no source")
			}
		default:
			errs.add(mp+".type", "%q is not volume, bind or tmpfs", m.Type)
		}
		if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target {
			errs.add(mp+".target", "%q is not a clean absolute path", m.Target)
		}
		if j, dup := targets[m.Target]; dup {
			errs.add(mp+".target", "%q is also the target of mounts[%d]", m.Target, j)
		}
		targets[m.Target] = i
	}
	nets := map[string]int{}
	for i, n := range c.Networks {
		np := fmt.Sprintf("%s.networks[%d]", p, i)
		if !networkNameRE.MatchString(n.Name) {
			errs.add(np+".name", "%q is not a network name", n.Name)
		}
		if j, dup := nets[n.Name]; dup {
			errs.add(np+".name", "%q is also networks[%d]", n.Name, j)
		}
		nets[n.Name] = i
		for j, a := range n.Aliases {
			if err := CheckName(a); err != nil {
				errs.add(fmt.Sprintf("%s.aliases[%d]", np, j), "not a valid host name: %v", err)
			}
		}
		if n.IPv4.IsValid() && !n.IPv4.Is4() {
			errs.add(np+".ipv4", "%s is not an IPv4 address", n.IPv4)
		}
		if n.IPv6.IsValid() && (!n.IPv6.Is6() || n.IPv6.Is4In6()) {
			errs.add(np+".ipv6", "%s is not an IPv6 address", n.IPv6)
		}
	}
	if c.Restart.Name != "" {
		if _, err := ParseRestartPolicy(c.Restart.String()); err != nil {
			errs.add(p+".restart", "%v", err)
		}
	}
	if c.StopSignal != "" && !signals[CanonicalSignal(c.StopSignal)] {
		errs.add(p+".stop_signal", "%q is not a stop signal (e.g. SIGTERM, SIGINT, SIGQUIT)", c.StopSignal)
	}
	if c.StopTimeout < 0 || c.StopTimeout > time.Hour {
		errs.add(p+".stop_timeout", "%s is out of range [0s, 1h]", c.StopTimeout)
	}
	if c.StopTimeout%time.Second != 0 {
		errs.add(p+".stop_timeout", "%s is not a whole number of seconds, which is what podman takes", c.StopTimeout)
	}
	if h := c.Healthcheck; h != nil && len(h.Test) == 0 {
		errs.add(p+".healthcheck.test", "is empty; give the command to run, e.g. [\"pg_isready\"]")
	}
	if r := c.Resources; r.MemoryBytes < 0 || r.MilliCPUs < 0 || r.PidsLimit < 0 {
		errs.add(p+".resources", "limits may not be negative")
	}
	for _, caps := range []struct {
		key  string
		list []string
	}{{"cap_add", c.CapAdd}, {"cap_drop", c.CapDrop}} {
		for i, cp := range caps.list {
			if !capRE.MatchString(cp) {
				errs.add(fmt.Sprintf("%s.%s[%d]", p, caps.key, i), "%q is not a capability name (e.g. NET_ADMIN)", cp)
			}
		}
	}
}

func normProto(p string) string {
	if p == "" {
		return DefaultProtocol
	}
	return p
}
