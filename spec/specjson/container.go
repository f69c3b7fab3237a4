package specjson

import (
	"math"
	"net/netip"
	"strconv"
	"time"

	"github.com/meshhost/meshhost/internal/plumbing/strictjson"
	"github.com/meshhost/meshhost/spec"
)

func readContainer(rep *strictjson.Report, p string, v strictjson.Value) spec.Container {
	o := rep.Object(p, v)
	var c spec.Container
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
			rp, err := spec.ParseRestartPolicy(s)
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

func readPort(rep *strictjson.Report, p string, v strictjson.Value) spec.Port {
	o := rep.Object(p, v)
	var port spec.Port
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

func readMount(rep *strictjson.Report, p string, v strictjson.Value) spec.Mount {
	o := rep.Object(p, v)
	var m spec.Mount
	if fv, fp, ok := o.Required("type"); ok {
		s, _ := rep.String(fp, fv)
		m.Type = spec.MountType(s)
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

func readNetwork(rep *strictjson.Report, p string, v strictjson.Value) spec.NetworkAttachment {
	o := rep.Object(p, v)
	var n spec.NetworkAttachment
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

func readHealthcheck(rep *strictjson.Report, p string, v strictjson.Value) spec.Healthcheck {
	o := rep.Object(p, v)
	var h spec.Healthcheck
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

func readResources(rep *strictjson.Report, p string, v strictjson.Value) spec.Resources {
	o := rep.Object(p, v)
	var r spec.Resources
	if fv, fp, ok := o.Field("memory"); ok {
		if s, ok := rep.String(fp, fv); ok {
			n, err := spec.ParseBytes(s)
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
