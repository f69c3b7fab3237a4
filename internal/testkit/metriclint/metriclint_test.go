package metriclint

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCheck: each convention, one metric breaking it, and one that keeps
// them all.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    prometheus.Collector
		want string // in the problem found; "" none
	}{
		{"fine", prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshhost_x_queries_total", Help: "h"}, []string{"rcode"}), ""},
		{"fine gauge in seconds", prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshhost_x_last_success_timestamp_seconds", Help: "h"}), ""},
		{"counter without _total", prometheus.NewCounter(prometheus.CounterOpts{Name: "meshhost_x_queries", Help: "h"}), "_total"},
		{"gauge with _total", prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshhost_x_queries_total", Help: "h"}), "_total"},
		{"milliseconds", prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshhost_x_latency_milliseconds", Help: "h"}), "base unit"},
		{"camelCase", prometheus.NewGauge(prometheus.GaugeOpts{Name: "meshhost_x_lastSuccess", Help: "h"}), "camelCase"},
		{"not meshhost's", prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_up", Help: "h"}), "meshhost_"},
		{"label camelCase", prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshhost_x_up", Help: "h"}, []string{"goVersion"}), "snake_case"},
		{"build_info's commit", prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshhost_build_info", Help: "h"}, []string{"version", "commit", "go_version"}), "build_info"},
		{"build_info fine", prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshhost_build_info", Help: "h"}, []string{"version", "revision", "goversion"}), ""},
		{"label unbounded", prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "meshhost_x_up", Help: "h"}, []string{"container"}), "unbounded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			reg.MustRegister(tc.c)
			if v, ok := tc.c.(*prometheus.GaugeVec); ok {
				if strings.HasSuffix(tc.name, "fine") || strings.HasPrefix(tc.name, "build_info") {
					v.WithLabelValues("a", "b", "c")
				} else {
					v.WithLabelValues("a")
				}
			}
			if v, ok := tc.c.(*prometheus.CounterVec); ok {
				v.WithLabelValues("a")
			}
			got, err := Gathered(reg)
			if err != nil {
				t.Fatal(err)
			}
			all := strings.Join(got, "\n")
			if tc.want == "" && len(got) > 0 || tc.want != "" && !strings.Contains(all, tc.want) {
				t.Errorf("problems = %q, want one saying %q", got, tc.want)
			}
		})
	}
}
