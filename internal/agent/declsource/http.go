package declsource

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/meshhost/meshhost/spec"
	"github.com/meshhost/meshhost/spec/specjson"
)

// Listen opens the push endpoint's listener: "unix:/path/to.sock" or a
// loopback "ip:port". Anything reachable from another machine is refused:
// the endpoint has no authentication of its own, so only the machine may
// reach it.
func Listen(addr string) (net.Listener, error) {
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
		return l, nil
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("push endpoint %q: want unix:/path or a loopback ip:port: %w", addr, err)
	}
	if !ap.Addr().IsLoopback() {
		return nil, fmt.Errorf("push endpoint %q: only a unix socket or a loopback address is allowed", addr)
	}
	l, err := net.Listen("tcp", ap.String())
	if err != nil {
		return nil, fmt.Errorf("push endpoint: %w", err)
	}
	return l, nil
}

// Handler serves PUT (or POST) /v1/declaration, a whole declaration or a
// declaration delta: 200 with the generation in force when accepted (the
// same declaration again included), 400 with every fault named when
// refused, 409 when it contradicts what is in force (ErrConflict: an older
// generation, the generation in force with other content, a roster older
// than the one served or with its generation and other names) or is a
// delta whose roster is from another generation than the one in force
// (ErrDeltaBase: the reason says so; send the whole declaration), 413 over
// spec.MaxDocumentBytes. GET returns the declaration in force.
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
			writeJSON(w, http.StatusOK, d)
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
