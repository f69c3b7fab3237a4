package sdnotify

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshhost/meshhost/internal/testkit/fakesystemd"
)

func TestNotifyAndStore(t *testing.T) {
	sd := fakesystemd.New(t)
	t.Setenv("NOTIFY_SOCKET", sd.Socket())
	if !Enabled() {
		t.Fatal("Enabled() = false with NOTIFY_SOCKET")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if err := Store("pipe-w", w); err != nil {
		t.Fatal(err)
	}
	if err := Store("pipe-w", w); err != nil { // again: the manager drops the duplicate
		t.Fatal(err)
	}
	if err := Notify(Ready); err != nil {
		t.Fatal(err)
	}
	sd.Wait(0, "READY=1", 5*time.Second)
	if got := sd.Stored(); len(got) != 1 || got[0] != "pipe-w" {
		t.Errorf("stored %v, want [pipe-w]", got)
	}
	if err := Remove("pipe-w"); err != nil {
		t.Fatal(err)
	}
	sd.Wait(0, "FDSTOREREMOVE=1", 5*time.Second)
	if got := sd.Stored(); len(got) != 0 {
		t.Errorf("stored %v after Remove, want none", got)
	}
}

// TestWatchdogLoop: pings come while alive says so, and stop while it
// does not (so the manager restarts a wedged process).
func TestWatchdogLoop(t *testing.T) {
	sd := fakesystemd.New(t)
	t.Setenv("NOTIFY_SOCKET", sd.Socket())
	t.Setenv("WATCHDOG_USEC", "200000")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var wedged atomic.Bool
	go func() {
		WatchdogLoop(ctx, slog.New(slog.DiscardHandler), func() error {
			if wedged.Load() {
				return errors.New("wedged")
			}
			return nil
		})
		close(done)
	}()
	i, _ := sd.Wait(0, "WATCHDOG=1", 5*time.Second)
	sd.Wait(i+1, "WATCHDOG=1", 5*time.Second)
	wedged.Store(true)
	time.Sleep(100 * time.Millisecond) // a ping decided before the switch may still arrive
	n := len(sd.Messages())
	time.Sleep(500 * time.Millisecond) // 10 ping intervals
	if got := len(sd.Messages()); got != n {
		t.Errorf("%d pings while not alive, want none", got-n)
	}
	wedged.Store(false)
	sd.Wait(n, "WATCHDOG=1", 5*time.Second)
	cancel()
	<-done

	// Without WATCHDOG_USEC the loop returns at once.
	t.Setenv("WATCHDOG_USEC", "")
	WatchdogLoop(context.Background(), slog.New(slog.DiscardHandler), func() error { return nil })
}
