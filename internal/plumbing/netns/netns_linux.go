// Package netns runs code inside a network namespace (a container's, say)
// from a process that stays in its own: a thread joins the namespace and
// stays there, and runs what it is given. A socket made there belongs to
// the namespace for good, whichever goroutine then uses it, so a lookup
// sent from it leaves from the container's interfaces, by its routes.
package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// NS is a thread inside a network namespace.
type NS struct {
	reqs chan func()
	stop chan struct{}
}

// Join starts a thread in the network namespace at path (such as
// /proc/PID/ns/net; joining another process's needs root). Close ends it.
func Join(path string) (*NS, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	n := &NS{reqs: make(chan func()), stop: make(chan struct{})}
	joined := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it stays in the namespace, and the
		// runtime ends it when this goroutine returns.
		runtime.LockOSThread()
		err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		joined <- err
		if err != nil {
			return
		}
		for {
			select {
			case <-n.stop:
				return
			case f := <-n.reqs:
				f()
			}
		}
	}()
	if err := <-joined; err != nil {
		return nil, fmt.Errorf("joining network namespace %s: %w", path, err)
	}
	return n, nil
}

// Close ends the namespace's thread.
func (n *NS) Close() { close(n.stop) }

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("network namespace closed")

// Do runs f on the namespace's thread and waits for it; f should be short
// (making a socket), since Do calls run one at a time.
func (n *NS) Do(ctx context.Context, f func()) error {
	select {
	case <-n.stop:
		return ErrClosed
	default:
	}
	done := make(chan struct{})
	select {
	case n.reqs <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stop:
		return ErrClosed
	}
	<-done
	return nil
}
