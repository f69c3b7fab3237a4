// Package procmetrics makes the Prometheus registry a meshhost process
// serves on /metrics, holding what every such process reports besides its
// own metrics: the Go runtime's (go_*), the process's (process_*) and
// meshhost_build_info, which names the build running.
package procmetrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

// NewRegistry returns a registry holding the Go runtime's and the
// process's collectors and meshhost_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		BuildInfo(buildinfo.Get()),
	)
	return reg
}

// BuildInfo returns meshhost_build_info: 1, labelled with the build's
// version, revision (its commit) and goversion (its Go release), the label
// names of Prometheus' own build_info metrics, so that a query can join any
// metric of a process to the build it runs (`* on(instance)
// group_left(version)`).
func BuildInfo(in buildinfo.Info) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meshhost_build_info",
		Help: "1, labelled with the running build's version (git describe), revision (its commit) and goversion (its Go release).",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(in.Version, in.Commit, in.Go).Set(1)
	return g
}

// Handler serves reg's metrics in Prometheus' text format.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// Serve serves reg on l's /metrics until ctx ends, then shuts down
// gracefully.
func Serve(ctx context.Context, l net.Listener, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", Handler(reg))
	s := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return s.Shutdown(sctx)
	case err := <-errc:
		return fmt.Errorf("serving metrics on %s: %w", l.Addr(), err)
	}
}
