package packaging

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/dnstest"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
)

// buildTags are the build tags the podman bindings need (the Makefile's TAGS).
const buildTags = "-tags=remote,exclude_graphdriver_btrfs,exclude_graphdriver_devicemapper,containers_image_openpgp"

// notExportedHere are metrics the agent the test runs cannot export: those
// labelled by the runtime's networks (the in-memory runtime has none), and
// the NATS roster source's (the agent has none). Each must still be
// registered by name in the file named.
var notExportedHere = map[string]string{
	"meshhost_migrations_network_failing":     "../migrations/metrics.go",
	"meshhost_migrations_network_resolve":     "../migrations/metrics.go",
	"meshhost_natssource_unreachable_seconds": "../internal/natssource/metrics.go",
	"meshhost_natssource_live":                "../internal/natssource/metrics.go",
	"meshhost_natssource_panics_total":        "../internal/natssource/metrics.go",
	"meshhost_natssource_refused_seconds":     "../internal/natssource/metrics.go",
	// Registered with the prober, which the in-memory runtime has none of.
	"meshhost_migrations_probe_panics_total": "../migrations/probe.go",
}

// TestRulesAndDashboardUseExportedMetrics runs a real agent (--runtime
// memory, one pass applied, configured by its file) and a real
// meshhost-resolver (--metrics),
// scrapes both, and checks every metric the alert rules and the dashboard
// name: it must be exported, with every label the queries match on, and,
// for a label matched with =, that value among its series (labelled
// metrics are pre-initialised, so a query never finds "no data" for a
// value that simply has not happened yet).
func TestRulesAndDashboardUseExportedMetrics(t *testing.T) {
	dir := t.TempDir()
	meshhost, resolverBin := build(t, dir, "meshhost"), build(t, dir, "meshhost-resolver")

	// The agent, with a declaration of two containers and two names, and
	// JSON logs.
	decl := filepath.Join(dir, "declaration", "d.json")
	os.Mkdir(filepath.Dir(decl), 0o755)
	if err := os.WriteFile(decl, []byte(`{"schema": 1, "machine": "m1", "generation": 3, "mesh_names": "off",
	  "roster": {"generation": 5, "zones": ["internal"], "names": {"db.m1.internal": ["10.89.0.5"], "web.m1.internal": ["10.89.0.6"]}},
	  "containers": [{"name": "db", "image": "busybox"}, {"name": "web", "image": "busybox", "depends_on": ["db"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	agentHTTP := freeTCP(t)
	var agentLog syncbuf.Buffer
	// Configured by its file, as the package's unit runs it.
	config := filepath.Join(dir, "agent.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`runtime = "memory"
machine = "m1"
state = %q
declaration = %q
push = "off"
http = %q
listen = [%q]
upstream = ["127.0.0.1:9"]
log-format = "json"
`, filepath.Join(dir, "state"), decl, agentHTTP, dnstest.FreePort(t).String())), 0o644); err != nil {
		t.Fatal(err)
	}
	start(t, &agentLog, meshhost, "agent", "--config", config)
	// The resolver alone.
	roster := filepath.Join(dir, "roster", "roster.json")
	os.Mkdir(filepath.Dir(roster), 0o755)
	if err := os.WriteFile(roster, []byte(`{"generation": 1, "zones": ["internal"], "names": {"gitea.novox.internal": ["10.89.0.7"]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	resolverHTTP := freeTCP(t)
	var resolverLog syncbuf.Buffer
	start(t, &resolverLog, resolverBin, "--roster", roster, "--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9",
		"--metrics", resolverHTTP)

	agentMetrics := scrapeUntil(t, agentHTTP, &agentLog, func(e exported) bool {
		return e.has("meshhost_agent_last_success_timestamp_seconds", nil, func(v float64) bool { return v > 0 })
	})
	resolverMetrics := scrapeUntil(t, resolverHTTP, &resolverLog, func(e exported) bool {
		return e.has("meshhost_resolver_roster_generation", nil, func(v float64) bool { return v == 1 })
	})
	all := exported{}
	for _, e := range []exported{agentMetrics, resolverMetrics} {
		for name, series := range e {
			all[name] = append(all[name], series...)
		}
	}
	for _, e := range []struct {
		name string
		e    exported
	}{{"agent", agentMetrics}, {"meshhost-resolver", resolverMetrics}} {
		if !e.e.has("meshhost_build_info", map[string]string{}, func(v float64) bool { return v == 1 }) {
			t.Errorf("the %s exports no meshhost_build_info", e.name)
		}
	}

	rules, err := os.ReadFile("prometheus/meshhost.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	queries := map[string][]string{"prometheus/meshhost.rules.yml": {string(rules)}}
	dash, err := os.ReadFile("grafana/meshhost.json")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var d any
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("grafana/meshhost.json: %v", err)
	}
	walk(d)
	if len(exprs) < 20 {
		t.Fatalf("grafana/meshhost.json: %d queries found, want the dashboard's (20 or more)", len(exprs))
	}
	queries["grafana/meshhost.json"] = exprs

	checked := 0
	for file, texts := range queries {
		for _, text := range texts {
			for _, ref := range references(text) {
				checked++
				series, ok := all[ref.name]
				if !ok {
					if src, dyn := notExportedHere[ref.name]; dyn {
						code, err := os.ReadFile(src)
						if err != nil || !strings.Contains(string(code), `"`+ref.name+`"`) {
							t.Errorf("%s: %s: not registered in %s (%v)", file, ref.name, src, err)
						}
						continue
					}
					t.Errorf("%s: %s is not exported by the agent or meshhost-resolver", file, ref.name)
					continue
				}
				for _, m := range ref.matchers {
					if m.label == "job" || m.label == "instance" {
						continue // Prometheus' own, added at scrape
					}
					if !slices.ContainsFunc(series, func(s map[string]string) bool { _, ok := s[m.label]; return ok }) {
						t.Errorf("%s: %s has no label %q (query %q)", file, ref.name, m.label, ref.text)
						continue
					}
					if m.op == "=" && !slices.ContainsFunc(series, func(s map[string]string) bool { return s[m.label] == m.value }) {
						t.Errorf("%s: %s{%s=%q} is not exported (not pre-initialised?)", file, ref.name, m.label, m.value)
					}
				}
			}
		}
	}
	if checked < 40 {
		t.Errorf("only %d metric references checked; the parser missed some", checked)
	}

	// --log-format json: every line the agent wrote is a JSON object.
	for _, l := range strings.Split(strings.TrimSpace(agentLog.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil || m["msg"] == nil {
			t.Errorf("agent --log-format json wrote a line that is not a JSON record: %q", l)
		}
	}
}

// exported is a scrape: every series, by metric name, as its labels.
type exported map[string][]map[string]string

// sampleRE and labelRE read Prometheus' text format: a sample line, and
// the labels inside its braces. A series' value is kept under __value__.
var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)`)
var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// has reports whether a series of name with the labels want (a subset)
// has a value ok accepts.
func (e exported) has(name string, want map[string]string, ok func(float64) bool) bool {
	for _, s := range e[name] {
		match := true
		for k, v := range want {
			match = match && s[k] == v
		}
		if !match {
			continue
		}
		if f, err := strconv.ParseFloat(s["__value__"], 64); err == nil && ok(f) {
			return true
		}
	}
	return false
}

func parse(r io.Reader) exported {
	e := exported{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		m := sampleRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		labels := map[string]string{"__value__": m[4]}
		for _, lm := range labelRE.FindAllStringSubmatch(m[3], -1) {
			labels[lm[1]] = lm[2]
		}
		e[m[1]] = append(e[m[1]], labels)
	}
	return e
}

// reference is one metric named in a query, with its label matchers.
type reference struct {
	name, text string
	matchers   []matcher
}

type matcher struct{ label, op, value string }

var (
	metricRE  = regexp.MustCompile(`\b((?:meshhost|process|go)_[a-z0-9_]+)(\{[^}]*\})?`)
	matcherRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"`)
)

// references returns the metrics text names: identifiers of meshhost's,
// the process's and the Go runtime's, each with the matchers of the
// selector that follows it. Grafana's variables ($instance) match anything.
func references(text string) []reference {
	var refs []reference
	for _, m := range metricRE.FindAllStringSubmatch(text, -1) {
		r := reference{name: m[1], text: m[0]}
		for _, mm := range matcherRE.FindAllStringSubmatch(m[2], -1) {
			if strings.Contains(mm[3], "$") {
				mm[2] = "=~"
			}
			r.matchers = append(r.matchers, matcher{mm[1], mm[2], mm[3]})
		}
		refs = append(refs, r)
	}
	return refs
}

func TestReferences(t *testing.T) {
	got := references(`sum by (instance) (rate(meshhost_resolver_queries_total{rcode="SERVFAIL", instance=~"$instance"}[5m])) / meshhost_x_total and go_goroutines > 0`)
	want := []reference{
		{"meshhost_resolver_queries_total", `meshhost_resolver_queries_total{rcode="SERVFAIL", instance=~"$instance"}`, []matcher{{"rcode", "=", "SERVFAIL"}, {"instance", "=~", "$instance"}}},
		{"meshhost_x_total", "meshhost_x_total", nil},
		{"go_goroutines", "go_goroutines", nil},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("references =\n%v\nwant\n%v", got, want)
	}
}

func build(t *testing.T, dir, cmd string) string {
	t.Helper()
	bin := filepath.Join(dir, cmd)
	c := exec.Command("go", "build", "-o", bin, "../cmd/"+cmd)
	c.Env = append(os.Environ(), "GOFLAGS="+buildTags, "CGO_ENABLED=0")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", cmd, err, out)
	}
	return bin
}

func start(t *testing.T, logs *syncbuf.Buffer, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
}

// freeTCP returns a loopback address whose TCP port was free a moment ago,
// outside the ephemeral range (dnstest.FreePort).
func freeTCP(t *testing.T) string {
	t.Helper()
	return dnstest.FreePort(t).String()
}

// scrapeUntil scrapes addr's /metrics until ready says the process got
// where the test needs it (60 s at most: a loaded machine).
func scrapeUntil(t *testing.T, addr string, logs *syncbuf.Buffer, ready func(exported) bool) exported {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			e := parse(resp.Body)
			resp.Body.Close()
			if ready(e) {
				return e
			}
			last = fmt.Errorf("scraped, not ready yet")
		} else {
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("http://%s/metrics not ready within 60 s (%v); the process's log:\n%s", addr, last, logs.String())
	return nil
}

// TestDocsListEveryAlert: the operator guide's table of alerts ("Alerts
// and dashboard" in docs/operator.md) has a row for each alert of the
// rules file, and none that the file lacks, and a section of its own for
// each (what to do: the alert's runbook_url points there), so on-call
// reads about every alert that can page them.
func TestDocsListEveryAlert(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join("prometheus", "meshhost.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	const doc = "docs/operator.md"
	guide, err := os.ReadFile(filepath.Join("..", doc))
	if err != nil {
		t.Fatal(err)
	}
	var inRules, inTable, inSections []string
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)\s*$`).FindAllSubmatch(rules, -1) {
		inRules = append(inRules, string(m[1]))
	}
	for _, m := range regexp.MustCompile(`(?m)^\| (Meshhost\w+) \|`).FindAllSubmatch(guide, -1) {
		inTable = append(inTable, string(m[1]))
	}
	for _, m := range regexp.MustCompile(`(?m)^#+ (Meshhost\w+)\s*$`).FindAllSubmatch(guide, -1) {
		inSections = append(inSections, string(m[1]))
	}
	slices.Sort(inRules)
	slices.Sort(inTable)
	slices.Sort(inSections)
	if len(inRules) == 0 {
		t.Fatal("no alert found in meshhost.rules.yml")
	}
	if !slices.Equal(inRules, inTable) {
		t.Errorf("alerts in meshhost.rules.yml:\n  %v\nrows of %s's alert table:\n  %v\nwant the same", inRules, doc, inTable)
	}
	if !slices.Equal(inRules, inSections) {
		t.Errorf("alerts in meshhost.rules.yml:\n  %v\nsections of %s named by an alert:\n  %v\nwant the same", inRules, doc, inSections)
	}
}
