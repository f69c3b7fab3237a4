//go:build !linux

package resolver

import (
	"errors"
	"net"
)

// read reads s's replies one at a time and delivers them, until s is closed.
func (s *upSock) read() {
	buf := make([]byte, replyBufSize)
	for {
		n, err := s.conn.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			s.fail(err)
			return
		}
		s.deliver(buf[:n], false)
	}
}
