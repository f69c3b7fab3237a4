package syncs

import (
	"sync"
	"testing"
)

func TestAssertLocked(t *testing.T) {
	var mu sync.Mutex
	t.Run("locked", func(t *testing.T) {
		mu.Lock()
		defer mu.Unlock()
		AssertLocked(&mu) // must not panic
	})
	t.Run("unlocked", func(t *testing.T) {
		defer func() {
			if recover() == nil {
				t.Error("AssertLocked on an unlocked mutex did not panic")
			}
		}()
		AssertLocked(&mu)
	})
	if !mu.TryLock() {
		t.Fatal("AssertLocked left the mutex locked")
	}
	mu.Unlock()
}
