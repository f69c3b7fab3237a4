package natssource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/meshhost/meshhost/spec"
)

// logRecorder keeps every log record's message and attributes as text.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }
func (l *logRecorder) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(strings.ToLower(line), strings.ToLower(s)) {
			out = append(out, line)
		}
	}
	return out
}

// permServer starts a server of the test's own whose whole configuration
// is Permissions(l, machines), the passwords in its environment; it
// returns its URL without credentials, and the password of each user.
func permServer(t *testing.T, l Layout, machines ...string) (*ownServer, map[string]string) {
	t.Helper()
	conf, err := Permissions(l, machines)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		t.Fatal(err)
	}
	pw := map[string]string{ControllerUser: "controller-pw"}
	t.Setenv(ControllerPasswordVar, pw[ControllerUser])
	for _, m := range machines {
		pw[MachineUser(m)] = m + "-pw"
		t.Setenv(MachinePasswordVar(m), pw[MachineUser(m)])
	}
	srv := &ownServer{t: t, bin: needNATS(t, "MESHHOST_NATS_SERVER"), dir: dir, port: freePort(t),
		extra:   []string{"--config", path},
		connect: []nats.Option{nats.UserInfo(ControllerUser, pw[ControllerUser])}}
	srv.start()
	t.Cleanup(srv.kill)
	return srv, pw
}

func userURL(srv *ownServer, user, pw string) string {
	return fmt.Sprintf("nats://%s:%s@%s", user, pw, strings.TrimPrefix(srv.URL(), "nats://"))
}

// TestPermissionsMachineReadsOnlyItsOwn runs a server whose configuration
// is what meshhost publish --print-permissions prints, and proves that:
// the agent's watcher works with exactly a machine's permissions (roster
// and own declaration, no permission refused); and a machine's
// credentials are refused every way to another machine's declaration
// (get, watch, any consumer it can ask for, a core subscription, the
// stream's messages) and every write to the roster.
func TestPermissionsMachineReadsOnlyItsOwn(t *testing.T) {
	l := LayoutFor(DefaultPrefix)
	srv, pw := permServer(t, l, "ace", "bay")
	ctrl := userURL(srv, ControllerUser, pw[ControllerUser])
	aceURL := userURL(srv, MachineUser("ace"), pw[MachineUser("ace")])
	p := newPublisher(t, ctrl, l)
	ctx := context.Background()

	const secret = "bay-secret-value"
	decl := func(machine string, gen uint64, env string) *spec.Declaration {
		return &spec.Declaration{Schema: 1, Machine: machine, Generation: gen, MeshNames: spec.FlagOff,
			Roster:     &spec.Roster{Generation: 1, Names: map[string][]netip.Addr{}},
			Containers: []spec.Container{{Name: "app", Image: "busybox", Env: map[string]string{"TOKEN": env}}}}
	}
	r1 := roster(20)
	publishRoster(t, p, 1, r1)
	for _, d := range []*spec.Declaration{decl("ace", 1, "ace-value"), decl("bay", 1, secret)} {
		if _, err := p.PublishDeclaration(ctx, d); err != nil {
			t.Fatal(err)
		}
	}

	// The agent's watcher, with ace's credentials, reads the roster and
	// ace's declaration, and follows both, no permission refused.
	logs := &logRecorder{}
	rec := newRecorder(t)
	rec.expect(1, r1)
	w := startWatcher(t, Config{Server: Server{URL: aceURL}, Layout: l, Machine: "ace", Sink: rec, OnChange: rec.onChange, Logger: slog.New(logs)})
	declared := func(gen, rosterGen uint64) func() bool {
		return func() bool {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			n := len(rec.decls)
			return n > 0 && rec.decls[n-1].Generation == gen && rec.decls[n-1].Roster.Generation == rosterGen
		}
	}
	waitFor(t, 20*time.Second, "ace's watcher reading its declaration with roster generation 1", declared(1, 1))
	r2 := roster(20)
	r2["new.internal"] = addrs("10.1.2.3")
	rec.expect(2, r2)
	if _, err := p.PublishDelta(ctx, Delta{Generation: 2, Set: map[string][]netip.Addr{"new.internal": addrs("10.1.2.3")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PublishDeclaration(ctx, decl("ace", 2, "ace-value-2")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "ace's watcher following roster generation 2 and declaration 2", declared(2, 2))
	rec.check()
	if err := w.Health(); err != nil {
		t.Errorf("ace's watcher: Health = %v", err)
	}

	// ace's credentials, every way to bay's declaration.
	var mu sync.Mutex
	var leaked []string
	nc, err := nats.Connect(aceURL, nats.CustomInboxPrefix(InboxPrefix("ace")), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// Whatever reaches ace's inbox, or any subscription below, must not
	// carry bay's value.
	catch := func(m *nats.Msg) {
		if bytes.Contains(m.Data, []byte(secret)) || strings.HasSuffix(m.Subject, "."+"bay") {
			mu.Lock()
			leaked = append(leaked, m.Subject)
			mu.Unlock()
		}
	}
	for _, subj := range []string{InboxPrefix("ace") + ".>", "$KV." + l.Machines + ".>", "_INBOX.>", InboxPrefix("bay") + ".>", ">"} {
		if _, err := nc.Subscribe(subj, catch); err != nil {
			t.Fatalf("Subscribe(%q): %v", subj, err)
		}
	}
	nc.Flush()

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	mkv, err := js.KeyValue(ctx, l.Machines)
	if err != nil {
		t.Fatalf("opening the machines bucket as ace: %v", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if e, err := mkv.Get(tctx, "ace"); err != nil {
		t.Errorf("ace getting its own declaration: %v", err)
	} else if !bytes.Contains(e.Value(), []byte("ace-value-2")) {
		t.Errorf("ace's own declaration: %s", e.Value())
	}
	cancel()
	tctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	if e, err := mkv.Get(tctx, "bay"); err == nil {
		t.Errorf("ace got bay's declaration: %s", e.Value())
	}
	cancel()
	for _, keys := range []string{"bay", ">", "*"} {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		kw, err := mkv.Watch(tctx, keys)
		if err == nil {
			select {
			case e := <-kw.Updates():
				if e != nil {
					t.Errorf("ace watching %q got %s: %s", keys, e.Key(), e.Value())
				}
			case <-tctx.Done():
			}
			kw.Stop()
		}
		cancel()
	}

	// Every consumer ace may ask for on the machines bucket: refused, or
	// (should the server take one) delivering nothing of bay's.
	ms, mb := "KV_"+l.Machines, "$KV."+l.Machines+"."
	deliver := InboxPrefix("ace") + ".deliver"
	type request struct{ subject, body string }
	consumer := func(filter, extra string) string {
		return fmt.Sprintf(`{"stream_name":%q,"config":{"deliver_subject":%q,"deliver_policy":"all","ack_policy":"none","filter_subject":%q%s}}`, ms, deliver, filter, extra)
	}
	api := "$JS.API."
	reqs := []request{
		{api + "CONSUMER.CREATE." + ms, consumer(mb+">", "")},
		{api + "CONSUMER.CREATE." + ms, consumer(mb+"bay", "")},
		{api + "CONSUMER.CREATE." + ms + ".c1", consumer(mb+">", `,"name":"c1"`)},
		{api + "CONSUMER.CREATE." + ms + ".c2", consumer("", `,"name":"c2"`)},
		{api + "CONSUMER.CREATE." + ms + ".c3." + mb + "bay", consumer(mb+"bay", `,"name":"c3"`)},
		{api + "CONSUMER.CREATE." + ms + ".c4." + mb + "ace", consumer(mb+">", `,"name":"c4"`)},
		{api + "CONSUMER.CREATE." + ms + ".c5." + mb + "ace", consumer(mb+"bay", `,"name":"c5"`)},
		{api + "CONSUMER.CREATE." + ms + ".c6." + mb + "ace", consumer("", `,"name":"c6"`)},
		{api + "CONSUMER.CREATE." + ms + ".c7." + mb + "ace", consumer(mb+"ace", `,"name":"c7","filter_subjects":[">"]`)},
		{api + "CONSUMER.DURABLE.CREATE." + ms + ".c8", consumer(mb+">", `,"durable_name":"c8"`)},
		{api + "STREAM.MSG.GET." + ms, `{"last_by_subj":"` + mb + `bay"}`},
		{api + "DIRECT.GET." + ms, `{"last_by_subj":"` + mb + `bay"}`},
		{api + "DIRECT.GET." + ms + "." + mb + "bay", ``},
		{api + "STREAM.CREATE.copy", `{"name":"copy","subjects":["copy"],"sources":[{"name":"` + ms + `"}]}`},
		{api + "CONSUMER.LIST." + ms, `{}`},
		{api + "STREAM.INFO." + ms, `{"subjects_filter":">"}`}, // keys only (see MachinePermissions)
	}
	for _, rq := range reqs {
		msg, err := nc.Request(rq.subject, []byte(rq.body), time.Second)
		verdict := "refused: " + fmt.Sprint(err)
		if err == nil {
			var resp struct {
				Error *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			json.Unmarshal(msg.Data, &resp)
			if resp.Error != nil {
				verdict = "refused by JetStream: " + resp.Error.Description
			} else {
				verdict = "answered: " + string(msg.Data)
				if bytes.Contains(msg.Data, []byte(secret)) {
					t.Errorf("%s: answered with bay's declaration", rq.subject)
				}
				if strings.Contains(rq.subject, "CONSUMER.") && !strings.Contains(rq.subject, ".c7.") {
					t.Errorf("%s %s: a consumer was created: %s", rq.subject, rq.body, msg.Data)
				}
			}
		}
		t.Logf("%s: %.200s", rq.subject, verdict)
	}

	// Writes to the roster, and to ace's own key: refused, the roster
	// commit stays.
	rkv, err := js.KeyValue(ctx, l.Roster)
	if err != nil {
		t.Fatalf("opening the roster bucket as ace: %v", err)
	}
	for _, write := range []func(context.Context) error{
		func(c context.Context) error {
			_, err := rkv.Put(c, NameKey("evil.internal"), []byte(`["10.6.6.6"]`))
			return err
		},
		func(c context.Context) error { return rkv.Delete(c, CommitKey) },
		func(c context.Context) error { return rkv.Purge(c, NameKey("h1.internal")) },
		func(c context.Context) error { _, err := mkv.Put(c, "ace", []byte(`{}`)); return err },
		func(c context.Context) error { _, err := mkv.Put(c, "bay", []byte(`{}`)); return err },
		func(c context.Context) error { return js.DeleteStream(c, "KV_"+l.Roster) },
		func(c context.Context) error {
			s, err := js.Stream(c, "KV_"+l.Roster)
			if err != nil {
				return err
			}
			return s.Purge(c)
		},
	} {
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := write(tctx); err == nil {
			t.Error("a write as ace was taken")
		}
		cancel()
	}
	// The controller writes bay's declaration again while ace listens.
	if _, err := p.PublishDeclaration(ctx, decl("bay", 2, secret)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	time.Sleep(500 * time.Millisecond)

	// An agent with ace's credentials configured for bay reads nothing of
	// bay's.
	stolen := newRecorder(t)
	thief := startWatcher(t, Config{Server: Server{URL: aceURL}, Layout: l, Machine: "bay", Sink: stolen, Patience: time.Second, Logger: slog.New(slog.DiscardHandler)})
	time.Sleep(2 * time.Second)
	stolen.mu.Lock()
	if len(stolen.decls) > 0 {
		t.Errorf("ace's credentials read bay's declaration through a watcher: %+v", stolen.decls[0])
	}
	stolen.mu.Unlock()
	_ = thief

	// What the controller sees: the roster untouched by ace.
	ckv, _ := p.js.KeyValue(ctx, l.Roster)
	if _, err := ckv.Get(ctx, NameKey("evil.internal")); err == nil {
		t.Error("ace's put to the roster is in the bucket")
	}
	if e, err := ckv.Get(ctx, CommitKey); err != nil {
		t.Errorf("the commit record after ace's writes: %v", err)
	} else if c, _ := parseCommit(e.Value()); c.Generation != 2 {
		t.Errorf("the commit record after ace's writes: generation %d, want 2", c.Generation)
	}
	mu.Lock()
	if len(leaked) > 0 {
		t.Errorf("bay's declaration reached ace on %v", leaked)
	}
	mu.Unlock()
	for _, line := range logs.matching("permission") {
		t.Errorf("ace's watcher was refused a permission it needs: %s", line)
	}
}
