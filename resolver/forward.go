package resolver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"
)

// replyTo is where an asynchronous (forwarded) answer goes.
type replyTo struct {
	udp  *net.UDPConn
	addr netip.AddrPort
	tcp  *tcpConn
}

func (r replyTo) send(b []byte) {
	switch {
	case b == nil:
	case r.udp != nil:
		r.udp.WriteToUDPAddrPort(b, r.addr)
	case r.tcp != nil:
		r.tcp.write(b)
	}
}

// startForward runs job in its own goroutine, or answers SERVFAIL at once
// when maxForwards are already in flight.
func (s *Server) startForward(job *forwardJob, to replyTo) {
	select {
	case s.forwards <- struct{}{}:
	default:
		s.metrics.count(job.qtype, rcodeServFail)
		to.send(servFail(job.req))
		return
	}
	s.wg.Go(func() {
		defer func() { <-s.forwards }()
		resp := s.forward(s.ctx, job)
		if resp != nil {
			s.metrics.count(job.qtype, resp[3]&0x0F)
		}
		to.send(resp)
	})
}

// forward asks job's targets in turn and returns the first useful answer,
// fitted to the client's size, or SERVFAIL when none gives one.
func (s *Server) forward(ctx context.Context, job *forwardJob) []byte {
	s.metrics.forwarded.Inc()
	var fallback []byte
	for _, target := range job.targets {
		start := time.Now()
		resp, err := exchange(ctx, job.req, target, s.cfg.UpstreamTimeout)
		s.metrics.latency.Observe(time.Since(start).Seconds())
		if err != nil {
			s.log.Debug("upstream failed", "upstream", target, "err", err)
			continue
		}
		if rc := resp[3] & 0x0F; rc == rcodeServFail || rc == rcodeRefused {
			fallback = resp // another upstream may do better
			continue
		}
		return fit(resp, job.limit)
	}
	if fallback != nil {
		return fit(fallback, job.limit)
	}
	return servFail(job.req)
}

func servFail(req []byte) []byte { return errorReply(req, rcodeServFail) }

// fit truncates a reply that exceeds limit to its header and question with
// TC set, so the client retries over TCP.
func fit(resp []byte, limit int) []byte {
	if len(resp) <= limit {
		return resp
	}
	end := headerLen
	if qend, ok := questionEnd(resp); ok {
		end = qend
	}
	out := resp[:end]
	out[2] |= 0x02 // TC
	if end == headerLen {
		out[4], out[5] = 0, 0
	}
	for i := 6; i < headerLen; i++ {
		out[i] = 0
	}
	return out
}

var errMismatch = errors.New("reply does not match the query")

// exchange sends req to server under a fresh random ID, over UDP and, when
// the reply is truncated, again over TCP. The reply carries req's ID.
func exchange(ctx context.Context, req []byte, server netip.AddrPort, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	q := append([]byte(nil), req...)
	var idb [2]byte
	rand.Read(idb[:])
	q[0], q[1] = idb[0], idb[1]

	resp, err := exchangeUDP(ctx, q, server)
	if err != nil {
		return nil, err
	}
	if resp[2]&0x02 != 0 { // TC: ask again over TCP
		if r, err := exchangeTCP(ctx, q, server); err == nil {
			resp = r
		}
	}
	resp[0], resp[1] = req[0], req[1]
	return resp, nil
}

func exchangeUDP(ctx context.Context, q []byte, server netip.AddrPort) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "udp", server.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 65535)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		if matches(q, buf[:n]) {
			return append([]byte(nil), buf[:n]...), nil
		}
		// Someone else's datagram (or a spoof): keep waiting.
	}
}

func exchangeTCP(ctx context.Context, q []byte, server netip.AddrPort) ([]byte, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", server.String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(q)), uint16(len(q)))
	if _, err := c.Write(append(msg, q...)); err != nil {
		return nil, err
	}
	var lb [2]byte
	if _, err := io.ReadFull(c, lb[:]); err != nil {
		return nil, err
	}
	resp := make([]byte, binary.BigEndian.Uint16(lb[:]))
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, err
	}
	if !matches(q, resp) {
		return nil, errMismatch
	}
	return resp, nil
}

// matches reports whether resp answers q: same ID, a response, same
// question (names compared case-insensitively).
func matches(q, resp []byte) bool {
	if len(resp) < headerLen || resp[0] != q[0] || resp[1] != q[1] || resp[2]&0x80 == 0 {
		return false
	}
	qe, ok1 := questionEnd(q)
	re, ok2 := questionEnd(resp)
	if !ok1 {
		return true // nothing to compare: the ID has to do
	}
	return ok2 && qe == re && strings.EqualFold(string(q[headerLen:qe]), string(resp[headerLen:re]))
}
