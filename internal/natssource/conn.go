package natssource

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Server says how to reach and authenticate to the NATS servers.
type Server struct {
	// URL is one server, or several separated by commas:
	// nats://host:4222, tls://host:4222.
	URL string
	// Creds is a NATS credentials file (a user JWT and its nkey seed), as
	// nsc writes it. Empty: no credentials.
	Creds string
	// CA verifies the server's certificate (PEM); Cert and Key are the
	// client's, for servers that ask for one. Any of them makes the
	// connection TLS.
	CA, Cert, Key string
	// Name names the connection on the server (its connz), e.g.
	// "meshhost agent novox".
	Name string
}

// RedactURL returns the server URLs u (one, or several separated by
// commas) with their credentials (nats://user:pass@host, nats://token@host)
// replaced by "redacted", for logs, errors and health.
func RedactURL(u string) string {
	parts := strings.Split(u, ",")
	for i, p := range parts {
		scheme, rest, ok := strings.Cut(p, "://")
		if !ok {
			scheme, rest = "", p
		}
		auth, path, slash := strings.Cut(rest, "/")
		if at := strings.LastIndex(auth, "@"); at >= 0 {
			auth = "redacted" + auth[at:]
		}
		rest = auth
		if slash {
			rest += "/" + path
		}
		if ok {
			rest = scheme + "://" + rest
		}
		parts[i] = rest
	}
	return strings.Join(parts, ",")
}

// Redacted is s.URL without its credentials (RedactURL).
func (s Server) Redacted() string { return RedactURL(s.URL) }

// check reports a fault an operator can act on before any connection is
// tried: a malformed URL, a file that cannot be read.
func (s Server) check() error {
	if s.URL == "" {
		return errors.New("no NATS server URL")
	}
	for _, u := range strings.Split(s.URL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			return fmt.Errorf("NATS server URL %q: %w", RedactURL(u), errors.Unwrap(err))
		}
		switch pu.Scheme {
		case "nats", "tls":
		default:
			return fmt.Errorf("NATS server URL %q: want nats://HOST:PORT or tls://HOST:PORT", RedactURL(u))
		}
		if pu.Host == "" {
			return fmt.Errorf("NATS server URL %q: no host", RedactURL(u))
		}
	}
	if (s.Cert == "") != (s.Key == "") {
		return errors.New("a client certificate needs both its certificate and its key file")
	}
	for _, f := range []struct{ what, path string }{{"credentials", s.Creds}, {"CA", s.CA}, {"client certificate", s.Cert}, {"client key", s.Key}} {
		if f.path == "" {
			continue
		}
		if _, err := os.ReadFile(f.path); err != nil {
			return fmt.Errorf("NATS %s file: %w", f.what, err)
		}
	}
	return nil
}

// Connect opens a connection to the server with the options of s, then
// extra.
func (s Server) Connect(extra ...nats.Option) (*nats.Conn, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	opts := []nats.Option{nats.Name(s.Name)}
	if s.Creds != "" {
		opts = append(opts, nats.UserCredentials(s.Creds))
	}
	if s.CA != "" {
		opts = append(opts, nats.RootCAs(s.CA))
	}
	if s.Cert != "" {
		opts = append(opts, nats.ClientCert(s.Cert, s.Key))
	}
	nc, err := nats.Connect(s.URL, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", s.Redacted(), err)
	}
	return nc, nil
}

// watchOptions are the connection options of a watcher with the given
// patience: it retries for ever (the roster in force is served meanwhile),
// and a server that stops answering is noticed within about half the
// patience (two pings unanswered), not after minutes.
func watchOptions(patience time.Duration) []nats.Option {
	ping := patience / 4
	ping = max(ping, 250*time.Millisecond)
	return []nats.Option{
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(min(time.Second, patience/4)),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.PingInterval(ping),
		nats.MaxPingsOutstanding(2),
		nats.Timeout(min(2*time.Second, max(patience/4, 500*time.Millisecond))),
	}
}
