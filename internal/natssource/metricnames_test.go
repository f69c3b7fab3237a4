package natssource

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/testkit/metriclint"
)

// TestMetricNames: the roster source's metrics keep Prometheus' naming
// conventions and meshhost's (metriclint); the agent's test scrape
// (packaging) cannot see them, an agent without NATS having none.
func TestMetricNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	problems, err := metriclint.Gathered(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
