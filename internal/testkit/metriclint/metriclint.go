// Package metriclint checks exported metrics against Prometheus' naming
// conventions (client_golang's promlint: snake_case names, _total on
// counters and only there, base units such as seconds and bytes)
// and meshhost's own: names under meshhost_ (besides the Go runtime's and
// the process's), snake_case label names, a build_info labelled as
// Prometheus' own is (version, revision, goversion), and no label whose values are
// unbounded (a container, a client, a name, an error): one series per such
// value would grow without end.
package metriclint

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// Unbounded are label names whose values are not a small fixed set, with
// what to do instead.
var Unbounded = map[string]string{
	"container":  "count by outcome; name the container in the log",
	"name":       "count by outcome; name it in the log",
	"client":     "count by network; name the client in the log",
	"addr":       "name the address in the log",
	"address":    "name the address in the log",
	"ip":         "name the address in the log",
	"qname":      "count by qtype and rcode",
	"query":      "count by qtype and rcode",
	"path":       "name the path in the log",
	"err":        "count by a fixed reason",
	"error":      "count by a fixed reason",
	"image":      "name the image in the log",
	"generation": "export the generation as a gauge's value",
	"id":         "name it in the log",
}

// buildInfoLabels are the labels of a _build_info metric, by Prometheus'
// own convention (its version collector's).
var buildInfoLabels = []string{"version", "revision", "branch", "goversion", "goos", "goarch", "tags"}

var snake = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// Check returns what is wrong with families, one line each ("NAME: what"),
// or nothing.
func Check(families []*dto.MetricFamily) ([]string, error) {
	return lint(promlint.NewWithMetricFamilies(families))
}

// Gathered checks what g gathers (Check).
func Gathered(g prometheus.Gatherer) ([]string, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	return Check(mfs)
}

// Text checks a scrape in Prometheus' text format (Check).
func Text(r io.Reader) ([]string, error) {
	return lint(promlint.New(r))
}

// lint runs l with meshhost's own conventions added: one line a problem,
// sorted.
func lint(l *promlint.Linter) ([]string, error) {
	l.AddCustomValidations(meshhost)
	problems, err := l.Lint()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range problems {
		out = append(out, p.Metric+": "+p.Text)
	}
	slices.Sort(out)
	return out, nil
}

// meshhost is the validation of meshhost's own conventions.
func meshhost(mf *dto.MetricFamily) []error {
	var errs []error
	name := mf.GetName()
	if !strings.HasPrefix(name, "meshhost_") && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
		errs = append(errs, fmt.Errorf("not under meshhost_"))
	}
	seen := map[string]bool{}
	for _, m := range mf.GetMetric() {
		for _, lp := range m.GetLabel() {
			ln := lp.GetName()
			if seen[ln] {
				continue
			}
			seen[ln] = true
			if !snake.MatchString(ln) {
				errs = append(errs, fmt.Errorf("label %q is not snake_case", ln))
			}
			if strings.HasSuffix(name, "_build_info") && !slices.Contains(buildInfoLabels, ln) {
				errs = append(errs, fmt.Errorf("label %q of a build_info metric: want those of Prometheus' own, %v", ln, buildInfoLabels))
			}
			if why, ok := Unbounded[ln]; ok {
				errs = append(errs, fmt.Errorf("label %q has unbounded values: %s", ln, why))
			}
		}
	}
	return errs
}
