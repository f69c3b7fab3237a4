package natssource

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCredentialsNeverPrinted: a URL with credentials in it (user and
// password, or a token) reaches no error, log line or health message.
func TestCredentialsNeverPrinted(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"nats://alice:s3cr3t@nats.example:4222", "nats://redacted@nats.example:4222"},
		{"nats://s3cr3t@nats.example:4222", "nats://redacted@nats.example:4222"},
		{"tls://alice:s3cr3t@a:4222, nats://b:4222,nats://bob:s3cr3t@c:4222/x", "tls://redacted@a:4222, nats://b:4222,nats://redacted@c:4222/x"},
		{"nats://nats.example:4222", "nats://nats.example:4222"},
		{"alice:s3cr3t@nats.example:4222", "redacted@nats.example:4222"},
	} {
		if got := RedactURL(tc.url); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.url, got, tc.want)
		}
	}
	// Every path that prints the URL: check's faults, Connect's error,
	// Health (which /readyz serves).
	for _, u := range []string{
		"http://alice:s3cr3t@nats.example:4222", // wrong scheme
		"nats://alice:s3cr3t@",                  // no host
		"nats://alice:s3cr3t@nats.example:4222/%zz",
		"nats://alice:s3cr3t@127.0.0.1:1", // nothing listens
	} {
		_, err := Server{URL: u}.Connect()
		if err == nil {
			t.Fatalf("Connect(%q) = nil error", u)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Connect(%q) = %v, which carries the password", u, err)
		}
	}
	w := &Watcher{cfg: Config{Server: Server{URL: "nats://alice:s3cr3t@nats.example:4222"}, Patience: time.Second}}
	w.health.Store(&healthState{down: time.Now().Add(-time.Minute), err: errors.New("connection refused")})
	err := w.Health()
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "redacted@nats.example") {
		t.Errorf("Health() = %v, want the URL without its password", err)
	}
}
