package yield

import (
	"errors"
	"io"
	"os"
)

// readChunk is how much ReadFile reads between two looks: four pages, at
// most four faults.
const readChunk = 16 << 10

// ReadFile is os.ReadFile in 16 KB reads with a look at pending (see
// Yielder.Pending; nil never waits) between them. One read of a 5 MB roster
// into fresh memory faults in every page inside the kernel, in one piece:
// 20 ms on a virtual machine, with the CPU held.
func ReadFile(path string, pending func() bool) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := 0
	if fi, err := f.Stat(); err == nil {
		size = int(fi.Size())
	}
	data := make([]byte, 0, size+1) // one more, to see the end without a second buffer
	y := Yielder{Pending: pending}
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)] // the file grew: let append find room
		}
		end := min(cap(data), len(data)+readChunk)
		n, err := f.Read(data[len(data):end])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		y.Now()
	}
}
