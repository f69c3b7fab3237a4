package declsource

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func doc(gen int, image string) string {
	return fmt.Sprintf(`{"schema": 1, "machine": "ace", "generation": %d,
	  "roster": {"generation": 1, "names": {"a.internal": ["10.0.0.1"]}},
	  "containers": [{"name": "app", "image": %q}]}`, gen, image)
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
		if l, err := Listen(addr); err == nil {
			l.Close()
			t.Errorf("Listen(%q) = nil error, want a refusal", addr)
		}
	}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatalf("Listen(loopback) = %v", err)
	}
	l.Close()
	sock := filepath.Join(t.TempDir(), "push.sock")
	l, err = Listen("unix:" + sock)
	if err != nil {
		t.Fatalf("Listen(unix) = %v", err)
	}
	defer l.Close()
	if fi, _ := os.Stat(sock); fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode = %v, want 0600", fi.Mode().Perm())
	}
}
