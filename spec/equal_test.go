package spec

import (
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// full is a Rendered with every field, at every depth, set.
func full() Rendered {
	a := netip.MustParseAddr
	return Rendered{
		Container: Container{
			Name: "db", Image: "postgres:16", Command: []string{"postgres"}, Entrypoint: []string{"entry"},
			Env: map[string]string{"A": "1"}, WorkingDir: "/w", User: "999", Labels: map[string]string{"team": "core"},
			Ports:       []Port{{HostIP: a("127.0.0.1"), HostPort: 5432, ContainerPort: 5432, Protocol: "tcp"}},
			Mounts:      []Mount{{Type: MountVolume, Source: "data", Target: "/data", ReadOnly: true}},
			Networks:    []NetworkAttachment{{Name: "mesh", Aliases: []string{"db"}, IPv4: a("10.89.0.5"), IPv6: a("fd00::5")}},
			Restart:     RestartPolicy{Name: "on-failure", MaxRetries: 5},
			StopSignal:  "SIGINT",
			StopTimeout: time.Minute,
			Healthcheck: &Healthcheck{Test: []string{"pg_isready"}, Interval: time.Second, Timeout: time.Second, StartPeriod: time.Second, Retries: 3},
			Resources:   Resources{MemoryBytes: 1 << 30, MilliCPUs: 1500, PidsLimit: 512},
			CapAdd:      []string{"NET_ADMIN"}, CapDrop: []string{"ALL"}, DependsOn: []string{"vault"},
		},
		Mode:  Resolve,
		Hosts: []HostEntry{{Name: "a.internal", Addr: a("10.0.0.1")}},
		DNS:   DNSConfig{Servers: []netip.Addr{a("10.88.0.1")}, Search: []string{"internal"}, Options: []string{"ndots:1"}},
	}
}

// leaves calls f with a path and a setter for every leaf of v (a field,
// an element of a list, a value of a map), so that a test can change
// each one alone. It covers fields added later without being told.
func leaves(v reflect.Value, path string, f func(path string, change func())) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[netip.Addr]() {
			f(path, func() { v.Set(reflect.ValueOf(netip.MustParseAddr("192.0.2.99"))) })
			return
		}
		for i := range v.NumField() {
			leaves(v.Field(i), path+"."+v.Type().Field(i).Name, f)
		}
	case reflect.Pointer:
		f(path+"=nil", func() { v.Set(reflect.Zero(v.Type())) })
		if !v.IsNil() {
			leaves(v.Elem(), path, f)
		}
	case reflect.Slice:
		f(path+"=nil", func() { v.Set(reflect.Zero(v.Type())) })
		f(path+"=empty", func() { v.Set(reflect.MakeSlice(v.Type(), 0, 0)) })
		f(path+"+1", func() { v.Set(reflect.Append(v, v.Index(0))) })
		for i := range v.Len() {
			leaves(v.Index(i), path+"[i]", f)
		}
	case reflect.Map:
		f(path+"=nil", func() { v.Set(reflect.Zero(v.Type())) })
		f(path+"=empty", func() { v.Set(reflect.MakeMap(v.Type())) })
		for _, k := range v.MapKeys() {
			f(path+"[k]", func() { v.SetMapIndex(k, reflect.ValueOf("changed")) })
		}
	case reflect.String:
		f(path, func() { v.SetString(v.String() + "x") })
	case reflect.Bool:
		f(path, func() { v.SetBool(!v.Bool()) })
	case reflect.Int, reflect.Int64:
		f(path, func() { v.SetInt(v.Int() + 1) })
	case reflect.Uint16:
		f(path, func() { v.SetUint(v.Uint() + 1) })
	default:
		panic("leaves: no change for " + path + " of kind " + v.Kind().String())
	}
}

// TestRenderedEqual: Equal tells apart two renderings that differ in any
// one leaf (every field, found by reflection, so a field added later is
// covered), and says equal ones are.
func TestRenderedEqual(t *testing.T) {
	base, again := full(), full()
	if !base.Equal(&again) || !base.Equal(&base) {
		t.Fatal("a rendering is not Equal to an equal one, or to itself")
	}
	n := 0
	r := full()
	leaves(reflect.ValueOf(&r).Elem(), "Rendered", func(path string, _ func()) {
		n++
		changed := full()
		var set func()
		leaves(reflect.ValueOf(&changed).Elem(), "Rendered", func(p string, change func()) {
			if p == path && set == nil {
				set = change
			}
		})
		set()
		if base.Equal(&changed) || changed.Equal(&base) {
			t.Errorf("changing %s: Equal still says the same", path)
		}
	})
	if n < 60 {
		t.Errorf("only %d leaves changed; the walk missed fields", n)
	}
}
