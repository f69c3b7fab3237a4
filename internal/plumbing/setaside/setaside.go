// Package setaside reports, as a metric, the logs set aside because a
// record before their last one was damaged (deltalog's PATH.corrupt-TIME
// copies): meshhost_state_corrupt_logs{log}, the copies present, by the
// log they were taken of. A gauge of the files, not a counter of the
// findings: the damage stays reported, across restarts, until the
// operator has looked and removed the copy.
package setaside

import (
	"path/filepath"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
)

var desc = prometheus.NewDesc("meshhost_state_corrupt_logs",
	"Copies of saved-state logs set aside for a record damaged before their last one (PATH.corrupt-TIME), by log: a state directory needing a look. Inspect the copy, then remove it.",
	[]string{"log"}, nil)

// suffix is what deltalog adds to the log's path.
var suffix = regexp.MustCompile(`\.corrupt-[^/]*$`)

// Collector is the metric over the copies list returns.
type Collector struct {
	root string
	logs []string
	list func() ([]string, error)
}

// New returns the collector of the copies list returns (paths). logs are
// the logs kept under root, relative to it: a file, or a directory of
// segments (a journal's kind); each is reported, 0 while none of its
// copies is there, so that an alert sees the series before it matters.
// A copy of a log not among them is labelled with its path relative to
// root.
func New(root string, logs []string, list func() ([]string, error)) *Collector {
	return &Collector{root: root, logs: logs, list: list}
}

// Glob lists the copies set aside of the log at path.
func Glob(path string) func() ([]string, error) {
	return func() ([]string, error) { return filepath.Glob(path + ".corrupt-*") }
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) { ch <- desc }

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	files, err := c.list()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(desc, err)
		return
	}
	n := map[string]int{}
	for _, l := range c.logs {
		n[l] = 0
	}
	for _, f := range files {
		n[c.label(suffix.ReplaceAllString(f, ""))]++
	}
	for log, k := range n {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(k), log)
	}
}

// label names the log at path: the known log it is, or is a segment of.
func (c *Collector) label(path string) string {
	rel, err := filepath.Rel(c.root, path)
	if err != nil {
		return path
	}
	for _, l := range c.logs {
		if rel == l || filepath.Dir(rel) == l {
			return l
		}
	}
	return rel
}
