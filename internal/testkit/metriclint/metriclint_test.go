package metriclint

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCheck: each convention, one metric breaking it, and metrics that
// keep them all.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		counter bool // else a gauge
		metric  string
		labels  []string
		want    string // in the problem found; "" none
	}{
		{"fine", true, "meshhost_x_queries_total", []string{"rcode"}, ""},
		{"fine gauge in seconds", false, "meshhost_x_last_success_timestamp_seconds", nil, ""},
		{"counter without _total", true, "meshhost_x_queries", nil, "_total"},
		{"gauge with _total", false, "meshhost_x_queries_total", nil, "_total"},
		{"milliseconds", false, "meshhost_x_latency_milliseconds", nil, "base unit"},
		{"camelCase", false, "meshhost_x_lastSuccess", nil, "camelCase"},
		{"not meshhost's", false, "x_up", nil, "meshhost_"},
		{"label camelCase", false, "meshhost_x_up", []string{"goVersion"}, "snake_case"},
		{"build_info's commit", false, "meshhost_build_info", []string{"version", "commit", "go_version"}, "build_info"},
		{"build_info fine", false, "meshhost_build_info", []string{"version", "revision", "goversion"}, ""},
		{"label unbounded", false, "meshhost_x_up", []string{"container"}, "unbounded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			values := slices.Repeat([]string{"a"}, len(tc.labels)) // one series, so that it is gathered
			if tc.counter {
				v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: tc.metric, Help: "h"}, tc.labels)
				reg.MustRegister(v)
				v.WithLabelValues(values...)
			} else {
				v := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: tc.metric, Help: "h"}, tc.labels)
				reg.MustRegister(v)
				v.WithLabelValues(values...)
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
