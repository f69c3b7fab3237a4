package spec

import (
	"maps"
	"slices"
	"unsafe"
)

// Equal reports whether r and o are the same rendering, every field
// alike. It is strict where a loose reading could only hide a change: a nil
// list or map differs from an empty one. Lists and maps that are the very
// same (one rendering given twice, as a pass that renders nothing anew
// does) are equal without reading them: a rendering is a value, changed by
// rendering again (Render always makes new ones), never in place. The
// reconciler uses it to reuse the record it computed for a container when
// the container renders as in the last pass.
func (r *Rendered) Equal(o *Rendered) bool {
	return r.Container.Equal(&o.Container) && r.Mode == o.Mode &&
		same(r.Hosts, o.Hosts) &&
		same(r.DNS.Servers, o.DNS.Servers) && same(r.DNS.Search, o.DNS.Search) && same(r.DNS.Options, o.DNS.Options)
}

// Equal reports whether c and o declare the same container, every field
// alike, as Rendered.Equal does.
func (c *Container) Equal(o *Container) bool {
	if c.Name != o.Name || c.Image != o.Image || c.WorkingDir != o.WorkingDir || c.User != o.User ||
		c.Restart != o.Restart || c.StopSignal != o.StopSignal || c.StopTimeout != o.StopTimeout || c.Resources != o.Resources {
		return false
	}
	if !same(c.Command, o.Command) || !same(c.Entrypoint, o.Entrypoint) || !same(c.CapAdd, o.CapAdd) ||
		!same(c.CapDrop, o.CapDrop) || !same(c.DependsOn, o.DependsOn) ||
		!same(c.Ports, o.Ports) || !same(c.Mounts, o.Mounts) ||
		!sameMap(c.Env, o.Env) || !sameMap(c.Labels, o.Labels) {
		return false
	}
	if (c.Networks == nil) != (o.Networks == nil) || len(c.Networks) != len(o.Networks) {
		return false
	}
	if unsafe.SliceData(c.Networks) != unsafe.SliceData(o.Networks) && !sameNetworks(c.Networks, o.Networks) {
		return false
	}
	switch h, g := c.Healthcheck, o.Healthcheck; {
	case h == nil || g == nil || h == g:
		return h == g
	default:
		return h.Interval == g.Interval && h.Timeout == g.Timeout && h.StartPeriod == g.StartPeriod &&
			h.Retries == g.Retries && same(h.Test, g.Test)
	}
}

func sameNetworks(a, b []NetworkAttachment) bool {
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Name != y.Name || x.IPv4 != y.IPv4 || x.IPv6 != y.IPv6 || !same(x.Aliases, y.Aliases) {
			return false
		}
	}
	return true
}

// same compares lists strictly (nil is not empty), the very same list
// without reading it.
func same[T comparable](a, b []T) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	return unsafe.SliceData(a) == unsafe.SliceData(b) || slices.Equal(a, b)
}

// sameMap compares maps strictly (nil is not empty), the very same map
// without reading it.
func sameMap(a, b map[string]string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	// A map value is a pointer to the map: the same pointer is the same map.
	return *(*unsafe.Pointer)(unsafe.Pointer(&a)) == *(*unsafe.Pointer)(unsafe.Pointer(&b)) || maps.Equal(a, b)
}
