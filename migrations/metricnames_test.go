package migrations

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/testkit/metriclint"
)

// TestMetricNames: the gate's metrics, one network's series among them
// (the agent's test scrape runs on a runtime without networks), keep
// Prometheus' naming conventions and meshhost's (metriclint).
func TestMetricNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.failing.WithLabelValues("podman")
	m.resolve.WithLabelValues("podman")
	problems, err := metriclint.Gathered(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
