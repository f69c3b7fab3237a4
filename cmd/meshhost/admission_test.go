package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshhost/meshhost/internal/admit"
	"github.com/meshhost/meshhost/internal/agent/declsource"
	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/internal/natssource"
	"github.com/meshhost/meshhost/internal/resolvercmd"
	"github.com/meshhost/meshhost/internal/testkit/decltest"
	"github.com/meshhost/meshhost/internal/testkit/needs"
	"github.com/meshhost/meshhost/internal/testkit/syncbuf"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// The admission table (issue 22, requirement 2): every case below runs
// through every path that takes such an input, and each path must answer
// with the case's verdict and reason. In force and served before each
// case: declaration 5 (web on busybox:1) with roster 3 {a, b}.
//
// Each case carries the input in the forms the paths take: a whole
// declaration (push, files, Put, the NATS machines bucket, publish), a
// declaration delta (push, files), a whole roster (the resolver's PUT and
// roster file, publish) and a roster delta (PutRosterDelta, the resolver's
// PATCH). A path the case has no input for must say why in na: nothing is
// skipped silently.

var (
	admA, admB, admB9, admC = "10.0.0.1", "10.0.0.2", "10.0.0.9", "10.0.0.3"
)

// admRoster is a roster document: gen, and name=addr pairs (addr "many":
// past the limit of addresses per name).
func admRoster(gen uint64, names ...string) string {
	r := decltest.NewRoster(gen)
	for _, n := range names {
		name, addr, _ := strings.Cut(n, "=")
		addrs := []string{addr}
		if addr == "many" {
			addrs = make([]string, spec.MaxAddrsPerName+1)
			for i := range addrs {
				addrs[i] = netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String()
			}
		}
		r.Name(name+".internal", addrs...)
	}
	return string(r.JSON())
}

// admDecl is a declaration document of generation gen running image, with
// roster (a document).
func admDecl(gen uint64, image, roster string) string {
	return fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "mesh_names": "off", "roster": %s,
	  "containers": [{"name": "web", "image": %q}]}`, gen, roster, image)
}

// admDelta is a roster delta from, to, setting name=addr (addr "many":
// past the limit of addresses per name).
func admDelta(from, to uint64, set string) *spec.RosterDelta {
	name, addr, _ := strings.Cut(set, "=")
	var addrs []netip.Addr
	if addr == "many" {
		for i := range spec.MaxAddrsPerName + 1 {
			addrs = append(addrs, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
		}
	} else {
		addrs = []netip.Addr{netip.MustParseAddr(addr)}
	}
	return &spec.RosterDelta{From: from, To: to, Set: map[string][]netip.Addr{name + ".internal": addrs}}
}

// admDeclDelta is a declaration delta document: generation gen, roster
// changed by d.
func admDeclDelta(gen uint64, d *spec.RosterDelta) string {
	var set []string
	for n, addrs := range d.Set {
		s := make([]string, len(addrs))
		for i, a := range addrs {
			s[i] = fmt.Sprintf("%q", a.String())
		}
		set = append(set, fmt.Sprintf("%q: [%s]", n, strings.Join(s, ",")))
	}
	return fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d, "roster_delta": {"from": %d, "generation": %d, "set": {%s}}}`,
		gen, d.From, d.To, strings.Join(set, ", "))
}

// The state before each case.
var (
	admInForce = admDecl(5, "busybox:1", admRoster(3, "a="+admA, "b="+admB))
	admServed  = admRoster(3, "a="+admA, "b="+admB)
)

// A verdict as the table states it: "accepted", "same", "refused REASON",
// or "accepted, roster only" (the declaration in force stays).
type admVerdict string

func refusedFor(r admit.Reason) admVerdict { return admVerdict("refused " + string(r)) }

const (
	admAccepted   admVerdict = "accepted"
	admSame       admVerdict = "same"
	admRosterOnly admVerdict = "accepted, roster only"
)

type admCase struct {
	name string
	// rollback: before the input, an operator rolls back to declaration
	// 4 (busybox:0): declaration 6 is in force, roster 3 kept.
	rollback bool
	decl     string                // a whole declaration document
	delta    string                // a declaration delta document
	roster   string                // a whole roster document
	rdelta   *spec.RosterDelta     // a roster delta
	rdGen    uint64                // the declaration generation rdelta was made under
	control  string                // an operator's control: "approve 9", "roster accept 9"
	want     admVerdict            // on every path that takes the input
	per      map[string]admVerdict // a path that answers otherwise, and (in a comment) why
	na       map[string]string     // a path that takes none of the case's inputs, and why
}

// Every path.
const (
	pOffer      = "push (declsource.Offer)"
	pHTTP       = "push (HTTP PUT /v1/declaration)"
	pFile       = "watched file"
	pDir        = "watched directory"
	pPut        = "declsource.Put (NATS declaration with its roster)"
	pRosterDel  = "declsource.PutRosterDelta (NATS roster commit)"
	pWatcher    = "NATS watcher (machines bucket, real nats-server)"
	pPubDecl    = "publish declaration"
	pPubRoster  = "publish roster"
	pCtlPut     = "resolver control PUT /v1/roster"
	pCtlPatch   = "resolver control PATCH /v1/roster"
	pRosterFile = "meshhost resolver --roster file"
	pPlan       = "meshhost plan DELTA (dry run)"
	pRollback   = "meshhost rollback"
	pApprove    = "meshhost approve"
	pAccept     = "meshhost roster accept"
)

var admPaths = []string{pOffer, pHTTP, pFile, pDir, pPut, pRosterDel, pWatcher, pPubDecl, pPubRoster, pCtlPut, pCtlPatch, pRosterFile, pPlan, pRollback, pApprove, pAccept}

// Why a path takes none of a case's inputs, said once for the cases that
// share it.
const (
	naControls   = "an operator's control (approve, roster accept) judges holds only: the not-held cases"
	naRollback   = "rollback re-issues a journaled declaration above every generation seen: it is the setup of the rollback cases, where it runs for real"
	naNoDecl     = "takes rosters only: the resolver knows no declaration generations"
	naNoRoster   = "the machines bucket holds declarations without their roster"
	naDeclDelta  = "takes whole documents: a delta's base is judged on the delta paths"
	naRosterOnly = "a roster alone carries no declaration content: a changed roster under a generation in force is the roster_generation_reused case"
)

func naFor(m map[string]string, paths ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for _, p := range paths {
		if _, ok := out[p]; !ok {
			switch p {
			case pApprove, pAccept:
				out[p] = naControls
			case pRollback:
				out[p] = naRollback
			case pPlan:
				out[p] = "plan runs on the agent's state, where no rollback is made here: the rollback row is the command"
			}
		}
	}
	return out
}

var admCases = []admCase{{
	name:   "same generation and content",
	decl:   admInForce,
	delta:  admDeclDelta(5, admDelta(2, 3, "b="+admB)),
	roster: admServed,
	rdelta: admDelta(2, 3, "b="+admB), rdGen: 5,
	want: admSame,
	na:   naFor(nil, pRollback, pApprove, pAccept),
}, {
	name:  "same generation, other content",
	decl:  admDecl(5, "busybox:2", admServed),
	delta: admDeclDelta(5, admDelta(2, 3, "b="+admB9)),
	want:  refusedFor(admit.GenerationReused),
	na: naFor(map[string]string{
		pPubRoster: naRosterOnly, pCtlPut: naRosterOnly, pCtlPatch: naRosterOnly, pRosterFile: naRosterOnly, pRosterDel: naRosterOnly,
	}, pRollback, pApprove, pAccept),
}, {
	name:  "older",
	decl:  admDecl(4, "busybox:1", admServed),
	delta: admDeclDelta(4, admDelta(2, 3, "b="+admB)),
	want:  refusedFor(admit.Older),
	na: naFor(map[string]string{
		pPubRoster: naNoDecl, pCtlPut: naNoDecl, pCtlPatch: naNoDecl, pRosterFile: naNoDecl,
		pRosterDel: "a roster delta of an older declaration applies to the roster in force (the rollback case)",
	}, pRollback, pApprove, pAccept),
}, {
	name:   "newer",
	decl:   admDecl(6, "busybox:2", admRoster(4, "a="+admA, "b="+admB, "c="+admC)),
	delta:  admDeclDelta(6, admDelta(3, 4, "c="+admC)),
	roster: admRoster(4, "a="+admA, "b="+admB, "c="+admC),
	rdelta: admDelta(3, 4, "c="+admC), rdGen: 5,
	want: admAccepted,
	na:   naFor(nil, pRollback, pApprove, pAccept),
}, {
	name:   "a roster delta from another base",
	delta:  admDeclDelta(6, admDelta(1, 4, "c="+admC)),
	rdelta: admDelta(1, 4, "c="+admC), rdGen: 5,
	want: refusedFor(admit.DeltaBase),
	na: naFor(map[string]string{
		pPut: naDeclDelta, pWatcher: naDeclDelta, pPubDecl: naDeclDelta, pPubRoster: naDeclDelta, pCtlPut: naDeclDelta, pRosterFile: naDeclDelta,
	}, pRollback, pApprove, pAccept),
}, {
	name:   "past the limits (a name with more addresses than fit a DNS answer)",
	decl:   admDecl(6, "busybox:1", admRoster(4, "a="+admA, "b="+admB, "c=many")),
	delta:  admDeclDelta(6, admDelta(3, 4, "c=many")),
	roster: admRoster(4, "a="+admA, "b="+admB, "c=many"),
	rdelta: admDelta(3, 4, "c=many"), rdGen: 5,
	want: refusedFor(admit.Invalid),
	na:   naFor(map[string]string{pWatcher: naNoRoster}, pRollback, pApprove, pAccept),
}, {
	name:   "a roster older than the one served",
	decl:   admDecl(6, "busybox:1", admRoster(2, "a="+admA)),
	roster: admRoster(2, "a="+admA),
	want:   refusedFor(admit.RosterOlder),
	na: naFor(map[string]string{
		pWatcher: naNoRoster, pPubDecl: naNoRoster,
		pRosterDel: "a delta to an older roster is from another base: the delta_base case",
		pCtlPatch:  "a delta to an older roster is from another base: the delta_base case",
		pPlan:      "plan takes declaration deltas, and a delta to an older roster is from another base: the delta_base case",
	}, pRollback, pApprove, pAccept),
}, {
	name:   "a roster of the served generation with other names",
	decl:   admDecl(6, "busybox:1", admRoster(3, "a="+admA, "b="+admB9)),
	roster: admRoster(3, "a="+admA, "b="+admB9),
	rdelta: admDelta(2, 3, "b="+admB9), rdGen: 5,
	want: refusedFor(admit.RosterGenerationReused),
	na: naFor(map[string]string{
		pWatcher: naNoRoster, pPubDecl: naNoRoster,
		pPlan: "plan takes declaration deltas, which name a declaration generation: at the one in force, the generation_reused case; above it, from another base",
	}, pRollback, pApprove, pAccept),
}, {
	name:     "rollback, then the controller's older declaration with a newer roster",
	rollback: true,
	decl:     admDecl(5, "busybox:1", admRoster(4, "a="+admA, "b="+admB, "c="+admC)),
	delta:    admDeclDelta(5, admDelta(3, 4, "c="+admC)),
	rdelta:   admDelta(3, 4, "c="+admC), rdGen: 5,
	want: refusedFor(admit.Older),
	per: map[string]admVerdict{
		// Where the roster travels apart from the declaration, it moves
		// alone under the rollback (issue 22 defect 4): the rollback is a
		// local override, the roster keeps flowing.
		pPut: admRosterOnly, pRosterDel: admAccepted,
	},
	na: naFor(map[string]string{
		pWatcher:   "the watcher compares declarations with its own last one, not the Source's rollback: its Put is the Put row",
		pPubDecl:   "publish judges against the machines bucket, where no rollback is (it is local)",
		pPubRoster: naNoDecl, pCtlPut: naNoDecl, pCtlPatch: naNoDecl, pRosterFile: naNoDecl,
	}, pPlan, pApprove, pAccept),
}, {
	name:     "rollback, then the controller's declaration of the rollback's generation",
	rollback: true,
	decl:     admDecl(6, "busybox:2", admRoster(4, "a="+admA, "b="+admB, "c="+admC)),
	delta:    admDeclDelta(6, admDelta(3, 4, "c="+admC)),
	rdelta:   admDelta(3, 4, "c="+admC), rdGen: 6,
	want: refusedFor(admit.GenerationReused),
	per: map[string]admVerdict{
		// The roster keeps flowing: a roster commit applies to the roster
		// in force whatever the declaration.
		pRosterDel: admAccepted,
	},
	na: naFor(map[string]string{
		pWatcher:   "the watcher compares declarations with its own last one, not the Source's rollback: its Put is the Put row",
		pPubDecl:   "publish judges against the machines bucket, where no rollback is (it is local)",
		pPubRoster: naNoDecl, pCtlPut: naNoDecl, pCtlPatch: naNoDecl, pRosterFile: naNoDecl,
	}, pPlan, pApprove, pAccept),
}, {
	name:     "rollback, then the controller's newer declaration",
	rollback: true,
	decl:     admDecl(7, "busybox:3", admRoster(4, "a="+admA, "b="+admB, "c="+admC)),
	delta:    admDeclDelta(7, admDelta(3, 4, "c="+admC)),
	want:     admAccepted,
	na: naFor(map[string]string{
		pRosterDel: "a roster delta changes no declaration: the rollback's is superseded by a declaration",
		pWatcher:   "the watcher compares declarations with its own last one, not the Source's rollback: its Put is the Put row",
		pPubDecl:   "publish judges against the machines bucket, where no rollback is (it is local)",
		pPubRoster: naNoDecl, pCtlPut: naNoDecl, pCtlPatch: naNoDecl, pRosterFile: naNoDecl,
	}, pPlan, pApprove, pAccept),
}, {
	name:    "approve of a declaration not held",
	control: "approve 9",
	want:    refusedFor(admit.NotHeld),
	na:      map[string]string{pAccept: "roster accept judges roster holds: the next case"},
}, {
	name:    "roster accept of a roster not held",
	control: "roster accept 9",
	want:    refusedFor(admit.NotHeld),
	na:      map[string]string{pApprove: "approve judges declaration holds: the case before"},
}}

func TestAdmissionIsOneRule(t *testing.T) {
	for _, tc := range admCases {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range admPaths {
				t.Run(path, func(t *testing.T) {
					if why, ok := tc.na[path]; ok {
						t.Logf("does not apply: %s", why)
						return
					}
					if tc.control != "" && path != pApprove && path != pAccept {
						t.Logf("does not apply: the case is an operator's control")
						return
					}
					want := tc.want
					if v, ok := tc.per[path]; ok {
						want = v
					}
					got, ok := admRun(t, path, tc)
					if !ok {
						t.Fatalf("the case has no input this path takes, and its na does not say why")
					}
					if got != want {
						t.Errorf("%s: %s, want %s", path, got, want)
					}
				})
			}
		})
	}
}

// admRun puts tc's input through path, from the state before each case,
// and returns the verdict; ok false when tc has no input for path.
func admRun(t *testing.T, path string, tc admCase) (admVerdict, bool) {
	switch path {
	case pOffer, pHTTP, pFile, pDir, pPut, pRosterDel:
		return admSource(t, path, tc)
	case pWatcher:
		if tc.decl == "" {
			return "", false
		}
		return admWatcher(t, tc), true
	case pPubDecl, pPubRoster:
		return admPublish(t, path, tc)
	case pCtlPut, pCtlPatch, pRosterFile:
		return admResolver(t, path, tc)
	case pPlan:
		return admPlan(t, tc)
	case pRollback:
		return admRollbackCmd(t, tc)
	case pApprove, pAccept:
		return admControl(t, path, tc)
	}
	t.Fatalf("no path %q", path)
	return "", false
}

// refusedCounts reads meshhost_agent_declarations_refused_total by reason.
func admRefused(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "meshhost_agent_declarations_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// admSourceState is a Source with declaration 5 and roster 3 in force and
// served (and, for a rollback case, the operator's rollback over it).
func admSourceState(t *testing.T, tc admCase, reg *prometheus.Registry, logger *slog.Logger) *declsource.Source {
	t.Helper()
	s := declsource.New(declsource.Config{Machine: "ace", Registerer: reg, Logger: logger})
	// Roster 3 made by a delta from roster 2, so that the same delta again
	// is the same.
	for _, doc := range []string{admDecl(4, "busybox:1", admRoster(2, "a="+admA)), admDeclDelta(5, admDelta(2, 3, "b="+admB))} {
		if _, err := s.Offer([]byte(doc), "setup"); err != nil {
			t.Fatal(err)
		}
	}
	s.SetServed(3, func() *spec.Roster { r, _ := s.Roster(); return r })
	if tc.rollback {
		cur, _ := s.Current()
		old, err := specjson.ParseDeclaration([]byte(admDecl(4, "busybox:0", admRoster(2, "a="+admA))))
		if err != nil {
			t.Fatal(err)
		}
		next, dec := admit.Rollback(old, cur, 5)
		if dec.Verdict != admit.Accepted {
			t.Fatal(dec.Err())
		}
		doc, err := next.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Offer(doc, "rollback"); err != nil {
			t.Fatalf("the rollback: %v", err)
		}
	}
	return s
}

// admVerdictOf tells what s did with an input, from the declaration in
// force before (gen, seq) and the refusals counted.
func admVerdictOf(t *testing.T, s *declsource.Source, reg *prometheus.Registry, gen, seq uint64, before map[string]float64) admVerdict {
	t.Helper()
	after := admRefused(t, reg)
	for r, n := range after {
		if n > before[r] {
			return admVerdict("refused " + r)
		}
	}
	d, _ := s.Current()
	_, now := s.Roster()
	switch {
	case now == seq:
		return admSame
	case d.Generation == gen:
		return admRosterOnly
	}
	return admAccepted
}

func admSource(t *testing.T, path string, tc admCase) (admVerdict, bool) {
	// once runs one input from the state before the case.
	once := func(put func(s *declsource.Source)) admVerdict {
		reg := prometheus.NewRegistry()
		s := admSourceState(t, tc, reg, nil)
		cur, _ := s.Current()
		_, seq := s.Roster()
		before := admRefused(t, reg)
		put(s)
		return admVerdictOf(t, s, reg, cur.Generation, seq, before)
	}
	var got []admVerdict
	for _, doc := range []string{tc.decl, tc.delta} {
		if doc == "" {
			continue
		}
		switch path {
		case pOffer:
			got = append(got, once(func(s *declsource.Source) { s.Offer([]byte(doc), "push") }))
		case pHTTP:
			got = append(got, once(func(s *declsource.Source) {
				rec := httptest.NewRecorder()
				s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v1/declaration", strings.NewReader(doc)))
			}))
		case pFile:
			got = append(got, once(func(s *declsource.Source) {
				file := filepath.Join(t.TempDir(), "declaration.json")
				if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
					t.Fatal(err)
				}
				s.ReadPath(file)
			}))
		case pDir:
			got = append(got, once(func(s *declsource.Source) {
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, "gen-000099.json"), []byte(doc), 0o600); err != nil {
					t.Fatal(err)
				}
				s.ReadPath(dir)
			}))
		case pPut:
			if doc != tc.decl {
				continue // Put takes whole declarations
			}
			d, err := specjson.ParseDeclaration([]byte(doc))
			if err != nil {
				// natssource parses each part before it puts it: a fault
				// of the document is refused there.
				got = append(got, refusedFor(admit.Invalid))
				continue
			}
			got = append(got, once(func(s *declsource.Source) { s.Put(d, "nats") }))
		}
	}
	if path == pRosterDel && tc.rdelta != nil {
		v := once(func(s *declsource.Source) { s.PutRosterDelta("ace", tc.rdGen, tc.rdelta, "nats") })
		if v == admRosterOnly {
			v = admAccepted // a roster delta moves the roster alone, always
		}
		got = append(got, v)
	}
	return admOne(t, path, got)
}

// admOne returns the verdict on a case's inputs through one path: every
// form it takes (a declaration and a declaration delta) must agree.
func admOne(t *testing.T, path string, got []admVerdict) (admVerdict, bool) {
	t.Helper()
	if len(got) == 0 {
		return "", false
	}
	for _, v := range got[1:] {
		if v != got[0] {
			t.Errorf("%s: the forms of the input disagree: %v", path, got)
		}
	}
	return got[0], true
}

var admReasonRE = regexp.MustCompile(`\((older_generation|generation_reused|roster_older|roster_generation_reused|delta_base)\)`)

// admReasonIn is the admission reason an error of publish names.
func admReasonIn(err error) admVerdict {
	if m := admReasonRE.FindStringSubmatch(err.Error()); m != nil {
		return admVerdict("refused " + m[1])
	}
	return refusedFor(admit.ReasonOf(err, admit.Invalid))
}

// admNATS returns a publisher on buckets of the test's own, holding
// declaration 5 and roster 3, and the revision of the declaration.
func admNATS(t *testing.T) (*natssource.Publisher, natssource.Layout, string, uint64) {
	t.Helper()
	url := os.Getenv("MESHHOST_NATS_URL")
	if url == "" {
		needs.Missing(t, "MESHHOST_NATS_URL is not set; run eval \"$(scripts/nats-up)\" first")
	}
	l := natssource.LayoutFor(fmt.Sprintf("t-adm-%d", time.Now().UnixNano()%1e12))
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		js.DeleteKeyValue(ctx, l.Roster)
		js.DeleteKeyValue(ctx, l.Machines)
		nc.Close()
	})
	p, err := natssource.NewPublisher(nc, l)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.EnsureBuckets(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := specjson.ParseDeclaration([]byte(admInForce))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishRoster(ctx, d.Roster); err != nil {
		t.Fatal(err)
	}
	rev, err := p.PublishDeclaration(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	return p, l, url, rev
}

func admPublish(t *testing.T, path string, tc admCase) (admVerdict, bool) {
	ctx := context.Background()
	switch {
	case path == pPubDecl && tc.decl != "":
		p, _, _, rev := admNATS(t)
		d, err := specjson.ParseDeclaration([]byte(tc.decl)) // as meshhost publish reads it
		if err != nil {
			return refusedFor(admit.Invalid), true
		}
		got, err := p.PublishDeclaration(ctx, d)
		switch {
		case err != nil:
			return admReasonIn(err), true
		case got == rev:
			return admSame, true
		}
		return admAccepted, true
	case path == pPubRoster && tc.roster != "":
		p, _, _, _ := admNATS(t)
		r, err := specjson.ParseRoster([]byte(tc.roster))
		if err != nil {
			return refusedFor(admit.Invalid), true
		}
		res, err := p.PublishRoster(ctx, r)
		switch {
		case err != nil:
			return admReasonIn(err), true
		case res.Unchanged:
			return admSame, true
		}
		return admAccepted, true
	}
	return "", false
}

var admRefusalRE = regexp.MustCompile(`refusal=(\w+)`)

// admWatcher writes the case's declaration (without its roster, as
// PublishDeclaration writes it, but past it) to the machines bucket a
// running watcher follows, and reads what the watcher and the Source it
// feeds made of it.
func admWatcher(t *testing.T, tc admCase) admVerdict {
	p, l, url, _ := admNATS(t)
	_ = p
	reg := prometheus.NewRegistry()
	s := declsource.New(declsource.Config{Machine: "ace", Registerer: reg})
	logs := &syncbuf.Buffer{}
	w, err := natssource.NewWatcher(natssource.Config{Server: natssource.Server{URL: url}, Layout: l, Machine: "ace", Sink: s,
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "declaration 5 in force", func() bool { d, _ := s.Current(); return d != nil && d.Generation == 5 })
	s.SetServed(3, func() *spec.Roster { r, _ := s.Roster(); return r })
	cur, _ := s.Current()
	_, seq := s.Roster()
	before := admRefused(t, reg)

	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(tc.decl), &top); err != nil {
		t.Fatal(err)
	}
	delete(top, "roster")
	data, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), l.Machines)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "ace", data); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if m := admRefusalRE.FindStringSubmatch(logs.String()); m != nil {
			return admVerdict("refused " + m[1])
		}
		if v := admVerdictOf(t, s, reg, cur.Generation, seq, before); v != admSame {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
	return admSame // nothing moved, nothing refused
}

func admResolver(t *testing.T, path string, tc admCase) (admVerdict, bool) {
	switch {
	case path == pCtlPatch && tc.rdelta == nil, path != pCtlPatch && tc.roster == "":
		return "", false
	}
	srv, err := resolver.New(resolver.Config{Upstreams: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:1")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	first, err := specjson.ParseRoster([]byte(admRoster(2, "a="+admA)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Update(first); err != nil {
		t.Fatal(err)
	}
	if err := srv.Apply(admDelta(2, 3, "b="+admB)); err != nil { // roster 3, as the agent's
		t.Fatal(err)
	}
	moved := func() admVerdict {
		if srv.Generation() != 3 {
			return admAccepted
		}
		return admSame
	}
	if path == pRosterFile {
		file := filepath.Join(t.TempDir(), "roster.json")
		if err := os.WriteFile(file, []byte(tc.roster), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := resolvercmd.ReloadRoster(slog.New(slog.DiscardHandler), srv, file); err != nil {
			return refusedFor(admit.ReasonOf(err, admit.Invalid)), true
		}
		return moved(), true
	}
	ctl, err := control.NewServer(control.Config{Resolver: srv})
	if err != nil {
		t.Fatal(err)
	}
	method, body := http.MethodPut, []byte(tc.roster)
	if path == pCtlPatch {
		method = http.MethodPatch
		if body, err = tc.rdelta.MarshalJSON(); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	ctl.Handler().ServeHTTP(rec, httptest.NewRequest(method, "/v1/roster", bytes.NewReader(body)))
	var res control.RosterResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatalf("%s: %v: %s", path, err, rec.Body)
	}
	if rec.Code == http.StatusOK {
		return moved(), true
	}
	if res.Reason == "" {
		return admVerdict(fmt.Sprintf("refused without a reason (HTTP %d: %s)", rec.Code, res.Error)), true
	}
	return admVerdict("refused " + res.Reason), true
}

// admAgent is an agent (controlsFixture) with declaration 4 (busybox:0,
// roster 2), then 5 and roster 3 in force and journaled.
func admAgent(t *testing.T) *controlsFixture {
	f := newControlsFixture(t)
	f.offer([]byte(admDecl(4, "busybox:0", admRoster(2, "a="+admA))))
	f.pass()
	f.offer([]byte(admInForce))
	f.pass()
	return f
}

// admRollbackCmd runs the rollback cases with the operator's rollback made
// by the command itself (meshhost rollback 4, pushed to the agent's
// socket), then the controller's declaration pushed to the same socket.
func admRollbackCmd(t *testing.T, tc admCase) (admVerdict, bool) {
	if !tc.rollback {
		return "", false
	}
	var got []admVerdict
	for _, doc := range []string{tc.decl, tc.delta} {
		if doc == "" {
			continue
		}
		f := admAgent(t)
		if code, out, errOut := f.cli("rollback", "4", "--push", "unix:"+f.push); code != 0 || !strings.Contains(out, "declaration 6 pushed") {
			t.Fatalf("rollback 4 = %d %s%s", code, out, errOut)
		}
		cur, _ := f.source.Current()
		_, seq := f.source.Roster()
		before := admRefused(t, f.reg)
		err := pushTo(context.Background(), "unix:"+f.push, "", []byte(doc))
		got = append(got, admVerdictOf(t, f.source, f.reg, cur.Generation, seq, before))
		if got[len(got)-1] == admAccepted && err != nil {
			t.Errorf("accepted, but the push says %v", err)
		}
	}
	return admOne(t, pRollback, got)
}

func admControl(t *testing.T, path string, tc admCase) (admVerdict, bool) {
	if tc.control == "" {
		return "", false
	}
	args := strings.Fields(tc.control)
	if (path == pApprove) != (args[0] == "approve") {
		return "", false
	}
	f := admAgent(t)
	code, _, errOut := f.cli(args...)
	switch {
	case code == 0:
		return admAccepted, true
	case strings.Contains(errOut, "is not held"):
		return refusedFor(admit.NotHeld), true
	}
	return admVerdict(fmt.Sprintf("refused otherwise (exit %d: %s)", code, errOut)), true
}

// admPlan judges the case's declaration delta as meshhost plan does, on an
// agent's state with declaration 5 and roster 3.
func admPlan(t *testing.T, tc admCase) (admVerdict, bool) {
	if tc.delta == "" {
		return "", false
	}
	f := admAgent(t)
	d, err := applyDelta(statedir.New(f.state), []byte(tc.delta))
	switch {
	case err != nil:
		return refusedFor(admit.ReasonOf(err, admit.Invalid)), true
	case d.Generation == 5:
		return admSame, true
	}
	return admAccepted, true
}
