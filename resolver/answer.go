package resolver

import (
	"bytes"
	"net/netip"
)

// Answer answers the DNS query req (wire format) from client as a UDP
// listener would, without a socket, and forwards nothing: for a question
// it would send to an upstream or a network-local server it returns nil
// and forwarded true, and sends nothing. For tests and the deterministic
// simulation (internal/testkit/sim), which judge what the resolver
// answers itself. The reply is the caller's.
func (s *Server) Answer(req []byte, client netip.Addr) (resp []byte, forwarded bool) {
	var sc scratch
	resp = s.handle(req, client, true, &sc, make([]byte, ednsSize), replyTo{forwarded: &forwarded})
	return bytes.Clone(resp), forwarded
}
