package resolver

import (
	"strconv"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's meshhost_resolver_* metrics. Query counts are
// plain atomic counters read at scrape time, so counting costs the hot path
// one atomic add and no label lookup.
type metrics struct {
	queries     [len(qtypeLabels)][16]atomic.Uint64 // by qtype index and rcode
	queriesDesc *prometheus.Desc
	forwarded   prometheus.Counter
	latency     prometheus.Histogram
	generation  prometheus.Gauge
	swap        prometheus.Histogram
	swapPanics  prometheus.Counter

	upstreamFailures prometheus.Counter
	cacheHits        prometheus.Counter
	cacheMisses      prometheus.Counter
	cacheEvictions   prometheus.Counter
	cacheFlushes     prometheus.Counter
	cacheEntries     prometheus.GaugeFunc
	swaps            *prometheus.CounterVec
	merges           prometheus.Counter
}

// qtypeLabels are the qtype label values; the last one counts the rest.
var qtypeLabels = [...]string{"A", "AAAA", "PTR", "SOA", "ANY", "TXT", "MX", "SRV", "NS", "CNAME", "HTTPS", "SVCB", "other"}

func qtypeIndex(t uint16) int {
	switch t {
	case typeA:
		return 0
	case typeAAAA:
		return 1
	case typePTR:
		return 2
	case typeSOA:
		return 3
	case typeANY:
		return 4
	case 16: // TXT
		return 5
	case 15: // MX
		return 6
	case 33: // SRV
		return 7
	case typeNS:
		return 8
	case 5: // CNAME
		return 9
	case 65: // HTTPS
		return 10
	case 64: // SVCB
		return 11
	}
	return len(qtypeLabels) - 1
}

var rcodeLabels = [16]string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"}

func rcodeLabel(r int) string {
	if rcodeLabels[r] != "" {
		return rcodeLabels[r]
	}
	return strconv.Itoa(r)
}

// newMetrics makes the metrics; c is the cache whose entries are counted,
// nil when there is none.
func newMetrics(reg prometheus.Registerer, c *cache) (*metrics, error) {
	m := &metrics{
		queriesDesc: prometheus.NewDesc("meshhost_resolver_queries_total",
			"DNS queries answered, by question type and response code.", []string{"qtype", "rcode"}, nil),
		forwarded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_forwarded_total",
			Help: "Queries forwarded to upstream or network-local servers.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshhost_resolver_upstream_latency_seconds",
			Help:    "Time for a forwarded query to be answered, failures included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshhost_resolver_roster_generation",
			Help: "Generation of the roster being served, 0 before the first.",
		}),
		swap: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshhost_resolver_swap_duration_seconds",
			Help:    "Time to validate, compile and swap in a roster.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		swapPanics: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_swap_panics_total",
			Help: "Roster swaps that panicked (a bug) while validating, compiling or saving the roster; the roster served stayed.",
		}),
		upstreamFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_upstream_failures_total",
			Help: "Forwarded queries an upstream did not answer in time, refused at the socket, or answered SERVFAIL or REFUSED.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_cache_hits_total",
			Help: "Questions for outside names answered from the cache.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_cache_misses_total",
			Help: "Questions for outside names the cache had no live answer for.",
		}),
		cacheEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_cache_evictions_total",
			Help: "Answers dropped from the full cache to make room (expired ones not counted).",
		}),
		cacheFlushes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_cache_flushes_total",
			Help: "Times the operator emptied the cache.",
		}),
		cacheEntries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meshhost_resolver_cache_entries",
			Help: "Answers in the cache, expired ones included until they are asked for or evicted.",
		}, func() float64 {
			if c == nil {
				return 0
			}
			return float64(c.len())
		}),
		swaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshhost_resolver_swaps_total",
			Help: "Rosters swapped in, by how: delta (Apply), diff (Update of a roster that changed few names) or whole (compiled whole).",
		}, []string{"how"}),
		merges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshhost_resolver_merges_total",
			Help: "Times the names changed by deltas were folded into a newly compiled table, in the background.",
		}),
	}
	for _, how := range []string{"delta", "diff", "whole"} {
		m.swaps.WithLabelValues(how)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{(*queryCollector)(m), m.forwarded, m.latency, m.generation, m.swap, m.swapPanics, m.swaps, m.merges,
		m.upstreamFailures, m.cacheHits, m.cacheMisses, m.cacheEvictions, m.cacheFlushes, m.cacheEntries} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// count records one answered query; rcode is the reply's 4-bit code.
func (m *metrics) count(qtype uint16, rcode byte) {
	m.queries[qtypeIndex(qtype)][rcode&0x0F].Add(1)
}

// queryCollector exports metrics.queries.
type queryCollector metrics

func (c *queryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.queriesDesc }

func (c *queryCollector) Collect(ch chan<- prometheus.Metric) {
	for qi := range c.queries {
		for r := range c.queries[qi] {
			// The named response codes are exported at 0 too, so that a
			// dashboard's SERVFAIL or REFUSED rate is 0, not "no data".
			if v := c.queries[qi][r].Load(); v > 0 || rcodeLabels[r] != "" {
				ch <- prometheus.MustNewConstMetric(c.queriesDesc, prometheus.CounterValue, float64(v), qtypeLabels[qi], rcodeLabel(r))
			}
		}
	}
}
