//go:build !linux

package netns

import (
	"context"
	"errors"
)

// NS is a thread inside a network namespace: only Linux has them.
type NS struct{}

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("network namespace closed")

// Join fails: only Linux has network namespaces.
func Join(string) (*NS, error) {
	return nil, errors.New("network namespaces are Linux's")
}

// Close does nothing.
func (*NS) Close() {}

// Do fails.
func (*NS) Do(context.Context, func()) error { return errors.New("no network namespaces here") }
