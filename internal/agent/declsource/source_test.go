package declsource

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/decltest"
)

// doc is declaration gen with roster 1 (no zones, a.internal) and one
// container app of image.
func doc(gen int, image string) string { return docB(gen, image).String() }

// docB is doc's builder, to change further.
func docB(gen int, image string) *decltest.Decl {
	return decltest.Declaration(uint64(gen)).RosterGen(1).Zones().Name("a.internal", "10.0.0.1").App("app", image)
}

func TestOffer(t *testing.T) {
	s := New(Config{})
	if _, err := s.Offer([]byte(doc(2, "busybox")), "test"); err != nil {
		t.Fatalf("Offer(valid) = %v", err)
	}
	if _, err := s.Offer([]byte(doc(3, "")), "test"); err == nil || !strings.Contains(err.Error(), "containers[0].image") {
		t.Errorf("Offer(bad image) = %v, want an error naming containers[0].image", err)
	}
	if _, err := s.Offer([]byte(doc(1, "busybox")), "test"); err == nil {
		t.Error("Offer(older generation) = nil error")
	}
	if _, err := s.Offer([]byte(doc(2, "busybox")), "test"); err != nil {
		t.Errorf("Offer(same generation again) = %v, want nil", err)
	}
	other := New(Config{Machine: "novox"})
	if _, err := other.Offer([]byte(doc(9, "busybox")), "test"); err == nil || !strings.Contains(err.Error(), `machine: "ace" is another machine`) {
		t.Errorf("Offer(declaration for ace) on novox = %v, want a refusal naming the machine", err)
	}
	d, _ := s.Current()
	if d.Generation != 2 || d.Containers[0].Image != "busybox" {
		t.Errorf("Current = gen %d image %q, want the last good one (2, busybox)", d.Generation, d.Containers[0].Image)
	}
}

func TestWatchPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "declaration.json")
	if err := os.WriteFile(path, []byte(doc(1, "a")), 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.WatchPath(ctx, path) }()
	waitFor(t, s, 1)

	// A controller replaces the file atomically.
	tmp := filepath.Join(dir, ".tmp")
	os.WriteFile(tmp, []byte(doc(2, "b")), 0o644)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, 2)

	// A faulty file is ignored and the previous declaration stays.
	os.WriteFile(path, []byte(`{"schema": 1,`), 0o644)
	time.Sleep(300 * time.Millisecond)
	if d, _ := s.Current(); d.Generation != 2 {
		t.Errorf("after a faulty file, generation = %d, want 2", d.Generation)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchPath = %v", err)
	}
}

func waitFor(t *testing.T, s *Source, gen uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if d, _ := s.Current(); d != nil && d.Generation == gen {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	d, _ := s.Current()
	t.Fatalf("generation %d never came into force; current %+v", gen, d)
}

func TestHandler(t *testing.T) {
	s := New(Config{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	put := func(body string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/declaration", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	if code, _ := put(doc(5, "busybox")); code != http.StatusOK {
		t.Errorf("PUT valid = %d, want 200", code)
	}
	code, body := put(strings.Replace(doc(6, "busybox"), `"image"`, `"imgae"`, 1))
	if code != http.StatusBadRequest {
		t.Errorf("PUT unknown field = %d, want 400", code)
	}
	if b, _ := json.Marshal(body["faults"]); !strings.Contains(string(b), `"path":"containers[0].imgae"`) {
		t.Errorf("faults = %s, want the path containers[0].imgae", b)
	}
	if code, _ := put(doc(4, "busybox")); code != http.StatusConflict {
		t.Errorf("PUT older generation = %d, want 409", code)
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", "10.1.2.3:8080", "[::]:0", "localhost:80"} {
		if l, err := Listen(addr, Access{Token: []byte("0123456789abcdef")}); err == nil {
			l.Close()
			t.Errorf("Listen(%q) = nil error, want a refusal", addr)
		}
	}
	l, err := Listen("127.0.0.1:0", Access{Token: []byte("0123456789abcdef")})
	if err != nil {
		t.Fatalf("Listen(loopback) = %v", err)
	}
	l.Close()
	sock := filepath.Join(t.TempDir(), "push.sock")
	l, err = Listen("unix:"+sock, Access{})
	if err != nil {
		t.Fatalf("Listen(unix) = %v", err)
	}
	defer l.Close()
	if fi, _ := os.Stat(sock); fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want 0600", fi.Mode().Perm())
	}
}

// deltaDoc is decltest.Delta(gen, from, to) setting the names of set (the
// inside of a JSON object, name -> addresses, in order) and removing remove.
func deltaDoc(gen, from, to int, set string, remove ...string) string {
	d := decltest.Delta(uint64(gen), uint64(from), uint64(to)).Remove(remove...)
	dec := json.NewDecoder(strings.NewReader("{" + set + "}"))
	if _, err := dec.Token(); err != nil {
		panic(err)
	}
	for dec.More() {
		var name string
		var addrs []string
		if tok, err := dec.Token(); err != nil {
			panic(err)
		} else {
			name = tok.(string)
		}
		if err := dec.Decode(&addrs); err != nil {
			panic(err)
		}
		d.Set(name, addrs...)
	}
	return d.String()
}

// TestOfferDelta: a declaration delta changes the roster in force in place
// (its containers stay); it applies only on top of the roster generation
// it names, and the same push twice is no fault; the Changes record each
// declaration as a roster delta with its undo.
func TestOfferDelta(t *testing.T) {
	s := New(Config{Machine: "ace"})
	if _, err := s.Offer([]byte(doc(2, "busybox")), "test"); err != nil {
		t.Fatal(err)
	}
	d, err := s.Offer([]byte(deltaDoc(3, 1, 2, `"b.internal": ["10.0.0.2"], "a.internal": ["10.0.0.9"]`)), "push")
	if err != nil {
		t.Fatal(err)
	}
	if d.Generation != 3 || d.Roster.Generation != 2 || d.Roster.Names != nil {
		t.Errorf("Offer(delta) = generation %d roster %d names %v; want 3, 2, and no names (a head)", d.Generation, d.Roster.Generation, d.Roster.Names)
	}
	if _, err := s.Offer([]byte(deltaDoc(3, 1, 2, `"b.internal": ["10.0.0.2"], "a.internal": ["10.0.0.9"]`)), "push"); err != nil {
		t.Errorf("the same delta twice: %v, want no fault", err)
	}
	if _, err := s.Offer([]byte(deltaDoc(4, 2, 3, ``, "a.internal")), "push"); err != nil {
		t.Fatal(err)
	}
	cur, _ := s.Current()
	if cur.Generation != 4 || cur.Roster.Generation != 3 || len(cur.Roster.Names) != 1 || cur.Roster.Names["b.internal"] == nil || cur.Containers[0].Image != "busybox" {
		t.Errorf("Current = %d, roster %d %v, containers %v", cur.Generation, cur.Roster.Generation, cur.Roster.Names, cur.Containers)
	}
	changes, ok := s.ChangesSince(0)
	if !ok || len(changes) != 3 {
		t.Fatalf("ChangesSince(0) = %d changes, %v; want 3", len(changes), ok)
	}
	if c := changes[1]; c.Whole || c.Generation != 3 || c.Roster.From != 1 || c.Roster.To != 2 || c.Undo.Set["a.internal"] == nil || !slices.Equal(c.Undo.Remove, []string{"b.internal"}) {
		t.Errorf("the first delta's change = %+v, roster %+v, undo %+v", c, c.Roster, c.Undo)
	}
	if c := changes[0]; !c.Whole || c.Roster.From != 0 || len(c.Roster.Set) != 1 {
		t.Errorf("the whole declaration's change = %+v, roster %+v", c, c.Roster)
	}
	if later, ok := s.ChangesSince(2); !ok || len(later) != 1 || later[0].Seq != 3 {
		t.Errorf("ChangesSince(2) = %+v, %v", later, ok)
	}
	if _, ok := s.ChangesSince(9); ok {
		t.Error("ChangesSince a change to come: ok")
	}
}

// TestOfferDeltaRefused: on top of TestOfferDelta's state (declaration 4,
// roster 3 with b.internal), a delta from another roster, one reusing the
// generation in force, an older one, one removing a name the roster has
// not and one for another machine are refused, and record no change.
func TestOfferDeltaRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  decltest.Doc
		want decltest.Verdict
	}{
		{"from_another_roster", decltest.Delta(5, 2, 4).Set("c.internal", "10.0.0.3"),
			decltest.Refused(ErrDeltaBase, "roster_delta.from: 2, but the roster in force is generation 3")},
		{"generation_in_force", decltest.Delta(4, 3, 4).Set("c.internal", "10.0.0.3"),
			decltest.Refused(ErrConflict, "generation: 4 is in force with roster generation 3, not 4")},
		{"older_generation", decltest.Delta(2, 3, 4).Set("c.internal", "10.0.0.3"),
			decltest.Refused(ErrStale, "generation: 2 is older than generation 4, which is in force")},
		{"removes_absent_name", decltest.Delta(5, 3, 4).Remove("a.internal"),
			decltest.Refused(nil, `roster_delta.remove[0]: "a.internal" is not in roster generation 3`)},
		{"another_machine", decltest.Delta(5, 3, 4).Machine("bob"), decltest.Refused(nil, `machine: "bob" is another machine`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New(Config{Machine: "ace"})
			decltest.Push(t, s, docB(2, "busybox"),
				decltest.Delta(3, 1, 2).Set("b.internal", "10.0.0.2").Set("a.internal", "10.0.0.9"),
				decltest.Delta(4, 2, 3).Remove("a.internal"))
			decltest.Offer(t, s, tc.doc, tc.want)
			if changes, ok := s.ChangesSince(0); !ok || len(changes) != 3 {
				t.Errorf("after a refused delta, ChangesSince(0) = %d changes, %v; want the 3 taken", len(changes), ok)
			}
		})
	}
}

// TestOfferWholeRecordsItsChange: a whole declaration is recorded as what
// changed from the one before: one name, not the roster.
func TestOfferWholeRecordsItsChange(t *testing.T) {
	s := New(Config{})
	if _, err := s.Offer([]byte(doc(1, "busybox")), "test"); err != nil {
		t.Fatal(err)
	}
	next := docB(2, "busybox").RosterGen(2).Name("b.internal", "10.0.0.2").String()
	if _, err := s.Offer([]byte(next), "test"); err != nil {
		t.Fatal(err)
	}
	changes, _ := s.ChangesSince(1)
	if len(changes) != 1 || !changes[0].Whole || len(changes[0].Roster.Set) != 1 || changes[0].Roster.Set["b.internal"] == nil || changes[0].Roster.From != 1 {
		t.Errorf("the change of a whole declaration adding one name = %+v, roster %+v", changes, changes[0].Roster)
	}
	if data, gen := s.Document(); gen != 2 || string(data) != next {
		t.Errorf("Document = generation %d, %d bytes; want the whole declaration 2", gen, len(data))
	}
}

// TestHandlerDelta: a pushed delta answers 200 with the roster generation
// in force; one from another roster generation 409 with the reason.
func TestHandlerDelta(t *testing.T) {
	s := New(Config{})
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	put := func(body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/v1/declaration", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := put(deltaDoc(1, 0, 1, `"a.internal": ["10.0.0.1"]`)); code != http.StatusConflict || !strings.Contains(body, "no declaration is in force") {
		t.Errorf("PUT delta before any declaration = %d %s, want 409 saying why", code, body)
	}
	put(doc(5, "busybox"))
	if code, body := put(deltaDoc(6, 1, 2, `"b.internal": ["10.0.0.2"]`)); code != http.StatusOK || !strings.Contains(body, `"roster_generation":2`) {
		t.Errorf("PUT delta = %d %s, want 200 with roster generation 2", code, body)
	}
	if code, body := put(deltaDoc(7, 1, 3, `"c.internal": ["10.0.0.3"]`)); code != http.StatusConflict || !strings.Contains(body, "the roster in force is generation 2") {
		t.Errorf("PUT delta from roster 1 over 2 = %d %s, want 409 saying the roster in force", code, body)
	}
	if code, body := put(deltaDoc(7, 2, 3, `"c..internal": ["10.0.0.3"]`)); code != http.StatusBadRequest || !strings.Contains(body, `roster_delta.set[\"c..internal\"]`) {
		t.Errorf("PUT faulty delta = %d %s, want 400 naming the path", code, body)
	}
}

// TestWatchDirDeltas: in a directory each file is read once, in name
// order, whole declarations and deltas alike; a restarted watcher starts
// at the newest whole declaration.
func TestWatchDirDeltas(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		tmp := filepath.Join(dir, ".tmp")
		os.WriteFile(tmp, []byte(content), 0o644)
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	write("gen-000001.json", doc(1, "a"))
	write("gen-000002.json", deltaDoc(2, 1, 2, `"b.internal": ["10.0.0.2"]`))
	s := New(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.WatchPath(ctx, dir) }()
	waitFor(t, s, 2)
	write("gen-000003.json", deltaDoc(3, 2, 3, `"c.internal": ["10.0.0.3"]`))
	write("gen-000004.json", deltaDoc(4, 3, 4, `"d.internal": ["10.0.0.4"]`))
	waitFor(t, s, 4)
	cancel()
	<-done
	r, _ := s.Roster()
	if r.Generation != 4 || len(r.Names) != 4 {
		t.Errorf("roster %d with %v, want 4 with a, b, c, d", r.Generation, r.Names)
	}

	// A new watcher (a restart) begins at the newest whole declaration.
	write("gen-000005.json", docB(5, "e").RosterGen(5).String())
	write("gen-000006.json", deltaDoc(6, 5, 6, `"f.internal": ["10.0.0.6"]`))
	s2 := New(Config{})
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	go s2.WatchPath(ctx, dir)
	waitFor(t, s2, 6)
	if r, _ := s2.Roster(); r.Generation != 6 || len(r.Names) != 2 {
		t.Errorf("a restarted watcher: roster %d with %v, want 6 with a and f", r.Generation, r.Names)
	}
}

// A watched directory takes a new file by the generation inside it, not
// by where its name sorts: gen-10.json sorts before gen-9.json.
func TestWatchDirNameOrder(t *testing.T) {
	cases := []struct {
		name  string
		first string // written before the watcher starts
		then  string // written while it runs
		want  uint64
	}{
		{"gen-10 after gen-9", "gen-9.json", "gen-10.json", 10},
		{"a name sorting first", "z.json", "a.json", 10},
		{"a name sorting last", "a.json", "z.json", 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, content string) {
				tmp := filepath.Join(dir, ".tmp")
				os.WriteFile(tmp, []byte(content), 0o644)
				if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
					t.Fatal(err)
				}
			}
			write(c.first, doc(9, "a"))
			s := New(Config{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.WatchPath(ctx, dir) }()
			waitFor(t, s, 9)
			write(c.then, doc(10, "b"))
			waitFor(t, s, c.want)
			cancel()
			<-done
		})
	}
}

// TestHeadWhileDeltasArrive: Head, which a pass and the roster loop read
// while deltas arrive, reads nothing a delta changes in place (run with
// -race): each Head is of one change, its roster generation, names and
// Seq together.
func TestHeadWhileDeltasArrive(t *testing.T) {
	s := New(Config{Machine: "ace"})
	if _, err := s.Offer([]byte(doc(2, "busybox")), "test"); err != nil {
		t.Fatal(err)
	}
	h0, _ := s.Head()
	done := make(chan struct{})
	var bad []string
	go func() {
		defer close(done)
		for range 2000 {
			h, _ := s.Head()
			k := h.Seq - h0.Seq // deltas taken
			if h.Declaration.Roster.Generation != h0.Declaration.Roster.Generation+k || h.Names != h0.Names+int(k) {
				bad = append(bad, fmt.Sprintf("seq %d: roster %d with %d names", h.Seq, h.Declaration.Roster.Generation, h.Names))
			}
			if k == 100 {
				return
			}
		}
	}()
	for i := range 100 {
		g := int(h0.Declaration.Roster.Generation) + i
		if _, err := s.Offer([]byte(deltaDoc(3+i, g, g+1, fmt.Sprintf(`"n%d.internal": ["10.1.0.%d"]`, i, i))), "push"); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if len(bad) > 0 {
		t.Errorf("torn heads: %v", bad)
	}
}
