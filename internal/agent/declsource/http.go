package declsource

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/meshhost/meshhost/internal/plumbing/peercred"
	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// Access says who may use the push endpoint. Root and the agent's own
// user always may; anyone else only as Access says.
type Access struct {
	// AllowUIDs may use a unix socket endpoint besides root and the
	// agent's own user (SO_PEERCRED).
	AllowUIDs []uint32
	// Token authenticates a TCP endpoint (ReadToken): every request must
	// carry "Authorization: Bearer TOKEN". A TCP endpoint without one is
	// refused.
	Token []byte
	// Log gets a line for each peer refused. Default: none.
	Log *slog.Logger
}

// Endpoint is the push endpoint's listener and the rule its requests
// pass: Guard(h) is the handler to serve on it.
type Endpoint struct {
	net.Listener
	token []byte // TCP: the bearer token; nil on a unix socket
}

// Listen opens the push endpoint's listener: "unix:/path/to.sock" (mode
// 0600, and only the peers Access admits: SO_PEERCRED) or a loopback
// "ip:port", which needs Access.Token. Anything reachable from another
// machine is refused.
func Listen(addr string, a Access) (*Endpoint, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("push endpoint: removing stale socket %s: %w", path, err)
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("push endpoint: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			l.Close()
			return nil, fmt.Errorf("push endpoint: %w", err)
		}
		return &Endpoint{Listener: &peercred.Listener{Listener: l, Allowed: peercred.Allow(a.AllowUIDs...), What: "push endpoint", Log: a.Log}}, nil
	}
	if err := CheckAddr(addr); err != nil {
		return nil, fmt.Errorf("push endpoint %w", err)
	}
	ap := netip.MustParseAddrPort(addr)
	if len(a.Token) == 0 {
		return nil, fmt.Errorf("push endpoint %q: a TCP push endpoint needs a token: give --push-token-file FILE (a file only root can read, holding a random token of at least %d characters), or push through a unix socket (--push unix:/path.sock)", addr, MinTokenLen)
	}
	l, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("push endpoint: %w", err)
	}
	return &Endpoint{Listener: l, token: slices.Clone(a.Token)}, nil
}

// CheckAddr checks a push endpoint's address as Listen takes it:
// unix:PATH, or a loopback ip:port.
func CheckAddr(addr string) error {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if strings.TrimPrefix(path, "//") == "" {
			return fmt.Errorf("%q: want unix:/path.sock", addr)
		}
		return nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want unix:/path.sock or a loopback ip:port, e.g. 127.0.0.1:8080", addr)
	}
	if !ap.Addr().IsLoopback() {
		return fmt.Errorf("%q: only a unix socket or a loopback address is allowed (the endpoint takes declarations): e.g. 127.0.0.1:%d, or unix:/run/meshhost/push.sock", addr, ap.Port())
	}
	return nil
}

// Guard returns h behind the endpoint's rule: on TCP, a request without
// the bearer token is answered 401, one with another token 403, before
// its body is read. A unix socket's peers were checked on accepting them.
func (e *Endpoint) Guard(h http.Handler) http.Handler {
	if e.token == nil {
		return h
	}
	want := sha256.Sum256(e.token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="meshhost push"`)
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "the push endpoint needs Authorization: Bearer TOKEN (the agent's --push-token-file)"})
			return
		}
		sum := sha256.Sum256([]byte(got))
		if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": "wrong token"})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MinTokenLen is the shortest push token ReadToken takes.
const MinTokenLen = 16

// ReadToken reads a push token from path, which must be a regular file
// owned by root (or this process's user) that neither its group nor others
// may read or write: the token is as good as root on this machine.
// Surrounding white space is not part of the token.
func ReadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("push token: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("push token: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("push token %s: not a regular file", path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("push token %s: owned by uid %d; it must be root's: chown root:root %s", path, st.Uid, path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("push token %s: mode %04o lets its group or others at it: chmod 600 %s", path, perm, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("push token: %w", err)
	}
	tok := bytes.TrimSpace(data)
	if len(tok) < MinTokenLen {
		return nil, fmt.Errorf("push token %s: %d characters; want at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(tok), MinTokenLen)
	}
	if bytes.ContainsAny(tok, " \t\r\n") {
		return nil, fmt.Errorf("push token %s: holds white space; want one token on one line", path)
	}
	return tok, nil
}

// Handler serves PUT (or POST) /v1/declaration, a whole declaration or a
// declaration delta: 200 with the generation in force when accepted (the
// same declaration again included), 400 with every fault named when
// refused, 409 when it contradicts what is in force (ErrConflict: an older
// generation, the generation in force with other content, a roster older
// than the one served or with its generation and other names) or is a
// delta whose roster is from another generation than the one in force
// (ErrDeltaBase: the reason says so; send the whole declaration), 413 over
// spec.MaxDocumentBytes. GET returns the declaration in force with the
// values of its env and labels redacted (spec.Declaration.Redacted): they
// may be secrets, and stay in the agent's root-only state.
func (s *Source) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/declaration", func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			d, _ := s.Current()
			if d == nil {
				writeJSON(w, http.StatusNotFound, map[string]string{"error": "no declaration yet"})
				return
			}
			writeJSON(w, http.StatusOK, d.Redacted())
		case http.MethodPut, http.MethodPost:
			var data []byte
			err := specjson.CheckSize(r.ContentLength) // a body said to be too large is not read
			if err == nil {
				data, err = io.ReadAll(io.LimitReader(r.Body, spec.MaxDocumentBytes+1))
				if err != nil {
					writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
					return
				}
				if len(data) > spec.MaxDocumentBytes { // read up to the limit only: its size is unknown
					err = &spec.FieldError{Reason: fmt.Sprintf("the document exceeds the limit: at most %d bytes", spec.MaxDocumentBytes)}
				}
			}
			var d *spec.Declaration
			if err != nil {
				err = &refused{RefusedTooLarge, err}
				s.refused.WithLabelValues(string(RefusedTooLarge)).Inc()
			} else {
				d, err = s.Offer(data, "push")
			}
			if err != nil {
				status := http.StatusBadRequest
				switch {
				case errors.Is(err, ErrConflict), errors.Is(err, ErrDeltaBase):
					status = http.StatusConflict
				case refusalOf(err) == RefusedTooLarge:
					status = http.StatusRequestEntityTooLarge
				}
				s.logger.Warn("pushed declaration refused; the previous one stays in force", "err", err)
				writeJSON(w, status, map[string]any{"error": "declaration refused", "faults": spec.Faults(err)})
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"machine": d.Machine, "generation": d.Generation, "roster_generation": d.Roster.Generation})
		default:
			w.Header().Set("Allow", "GET, PUT, POST")
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use PUT or GET"})
		}
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
