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
	"github.com/meshhost/meshhost/internal/testkit/metriclint"
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
		"--metrics", resolverHTTP, "--log-format", "json")

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
	// Every metric both export keeps Prometheus' conventions and
	// meshhost's (metriclint): names, units, _total, bounded labels.
	for _, p := range []struct{ name, addr string }{{"agent", agentHTTP}, {"meshhost-resolver", resolverHTTP}} {
		resp, err := http.Get("http://" + p.addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		problems, err := metriclint.Text(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s's /metrics: %v", p.name, err)
		}
		for _, pr := range problems {
			t.Errorf("%s exports %s", p.name, pr)
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

	// --log-format json: every line both wrote is a JSON object; and so is
	// every line of each when it stops with an error (a state directory
	// that is a file; a roster that is not there): the error's line was
	// plain text.
	notDir := filepath.Join(dir, "not-a-directory")
	os.WriteFile(notDir, nil, 0o644)
	failed := func(bin string, args ...string) string {
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err == nil {
			t.Errorf("%s %q succeeded, want an error", filepath.Base(bin), args)
		}
		return string(out)
	}
	for _, l := range []struct{ name, lines string }{
		{"agent", agentLog.String()},
		{"meshhost-resolver", resolverLog.String()},
		{"agent stopping with an error", failed(meshhost, "agent", "--runtime", "memory", "--machine", "m1", "--state", notDir,
			"--push", "off", "--http", freeTCP(t), "--listen", dnstest.FreePort(t).String(), "--log-format", "json")},
		{"meshhost-resolver stopping with an error", failed(resolverBin, "--roster", filepath.Join(dir, "no-roster.json"),
			"--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9", "--log-format", "json")},
		{"meshhost resolver stopping with an error", failed(meshhost, "resolver", "--roster", filepath.Join(dir, "no-roster.json"),
			"--listen", dnstest.FreePort(t).String(), "--upstream", "127.0.0.1:9", "--log-format", "json")},
	} {
		for _, line := range strings.Split(strings.TrimSpace(l.lines), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil || m["msg"] == nil {
				t.Errorf("%s, --log-format json: a line that is not a JSON record: %q", l.name, line)
			}
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

// TestDashboardOneMachineSelector: the dashboard has one machine selector,
// and every panel's query selects by it. A machine is scraped on two
// targets (the agent's :9469, the resolver's :9470): the selector lists
// it once, and choosing it shows both targets' panels (a selector of
// instances listed each machine twice, and half the panels for either).
func TestDashboardOneMachineSelector(t *testing.T) {
	raw, err := os.ReadFile("grafana/meshhost.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name, Type, Regex string
			}
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	var selectors []string
	var regex string
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			selectors = append(selectors, v.Name)
			regex = v.Regex
		}
	}
	if !slices.Equal(selectors, []string{"machine"}) {
		t.Fatalf("query variables %q, want one: machine", selectors)
	}
	// Grafana keeps the regex's first group as the variable's value.
	re, err := regexp.Compile(strings.TrimSuffix(strings.TrimPrefix(regex, "/"), "/"))
	if err != nil {
		t.Fatalf("machine's regex %q: %v", regex, err)
	}
	values := map[string]bool{}
	for _, instance := range []string{"m1:9469", "m1:9470", "m10:9469", "m10.example.org:9470"} {
		m := re.FindStringSubmatch(instance)
		if m == nil {
			t.Fatalf("machine's regex %q does not match instance %q", regex, instance)
		}
		values[m[1]] = true
	}
	if want := map[string]bool{"m1": true, "m10": true, "m10.example.org": true}; fmt.Sprint(values) != fmt.Sprint(want) {
		t.Errorf("machine's values from the instances = %v, want %v", values, want)
	}
	const sel = "$machine"
	queries := 0
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, ref := range references(tg.Expr) {
				queries++
				var instance *matcher
				for i, m := range ref.matchers {
					if m.label == "instance" {
						instance = &ref.matchers[i]
					}
				}
				if instance == nil || !strings.Contains(instance.value, sel) {
					t.Errorf("panel %q: %s does not select by the machine (instance=~\"%s...\")", p.Title, ref.text, sel)
					continue
				}
				// Grafana writes a choice of m1 as (m1): the query must
				// take both of m1's targets, and not m10's.
				q := regexp.MustCompile("^(?:" + strings.ReplaceAll(instance.value, sel, "(m1)") + ")$")
				if !q.MatchString("m1:9469") || !q.MatchString("m1:9470") || q.MatchString("m10:9469") {
					t.Errorf("panel %q: instance=~%q chosen m1: want m1:9469 and m1:9470, not m10:9469", p.Title, instance.value)
				}
			}
		}
	}
	if queries < 20 {
		t.Errorf("%d metric selectors in the panels; want the dashboard's (20 or more)", queries)
	}
}

// TestEveryAlertHasARunbook: every alert's annotations carry runbook_url,
// pointing at the section of the operator guide named after the alert
// (docs/operator.md#meshhostagentnotconverging); and, where the guide is
// in the tree, that section exists (GitHub's anchor of a heading that is
// the alert's name).
func TestEveryAlertHasARunbook(t *testing.T) {
	rules, err := os.ReadFile(filepath.Join("prometheus", "meshhost.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	const guide = "https://github.com/meshhost/meshhost/blob/main/docs/operator.md#"
	alertRE := regexp.MustCompile(`(?m)^\s*- alert: (\w+)\s*$`)
	runbookRE := regexp.MustCompile(`(?m)^\s+runbook_url: "([^"]*)"\s*$`)
	starts := alertRE.FindAllSubmatchIndex(rules, -1)
	if len(starts) < 10 {
		t.Fatalf("%d alerts found in meshhost.rules.yml; the parser missed some", len(starts))
	}
	var anchors []string
	for i, s := range starts {
		end := len(rules)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		name := string(rules[s[2]:s[3]])
		urls := runbookRE.FindAllSubmatch(rules[s[0]:end], -1)
		want := guide + strings.ToLower(name)
		if len(urls) != 1 || string(urls[0][1]) != want {
			t.Errorf("%s: runbook_url %q, want one: %q", name, urls, want)
			continue
		}
		anchors = append(anchors, strings.ToLower(name))
	}
	doc, err := os.ReadFile(filepath.Join("..", "docs", "operator.md"))
	if os.IsNotExist(err) {
		t.Logf("docs/operator.md is not in the tree: its sections %v are not checked", anchors)
		return
	} else if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ +(.+?)\s*$`).FindAllSubmatch(doc, -1) {
		headings[githubAnchor(string(m[1]))] = true
	}
	for _, a := range anchors {
		if !headings[a] {
			t.Errorf("docs/operator.md has no section #%s (a heading %q)", a, a)
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading: lowercase,
// punctuation but hyphens and underscores dropped, spaces made hyphens.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
