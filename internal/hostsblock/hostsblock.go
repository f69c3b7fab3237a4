// Package hostsblock keeps meshhost's marked block in a hosts file (the
// host's own /etc/hosts, for the host's lookups of the machine's own mesh
// names): it rewrites the lines between Begin and End, and nothing else,
// atomically, so that a reader (glibc's files lookup) sees the old file or
// the new one, never a part, and every other line stays byte for byte.
//
// Not yet wired to the agent (issue 24 item 2): the caller decides which
// names go in the block and when.
package hostsblock

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/meshhost/meshhost/internal/plumbing/atomicfile"
	"github.com/meshhost/meshhost/spec"
)

// The block's marker lines. Everything between them is meshhost's and
// rewritten whole; an operator's line there is lost at the next rewrite.
const (
	Begin = "# BEGIN meshhost (managed: lines up to END are rewritten by meshhost; edit the declaration instead)"
	End   = "# END meshhost"
)

// MaxEntries bounds the block: every getaddrinfo of the host reads the whole
// file line by line, so a roster-sized block would slow every lookup the
// host makes, mesh or not.
const MaxEntries = 4096

// ErrMarkers reports a block whose markers are not one Begin followed by
// one End, each alone on its line: another tool (or a person) cut or
// duplicated them. Splice then changes nothing rather than guess which
// lines are meshhost's.
var ErrMarkers = errors.New("hostsblock: the meshhost block's markers are damaged")

// Splice returns content with the block holding entries, one "ADDR\tNAME"
// line each, sorted by name then address, without duplicates: in place of
// the old block, or appended at the end when content has none. No entries
// removes the block (and the marker lines). Every line outside the block
// is kept as it was.
func Splice(content []byte, entries []spec.HostEntry) ([]byte, error) {
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("hostsblock: %d entries; at most %d", len(entries), MaxEntries)
	}
	block, err := render(entries)
	if err != nil {
		return nil, err
	}
	lines := bytes.SplitAfter(content, []byte("\n"))
	if n := len(lines); n > 0 && len(lines[n-1]) == 0 {
		lines = lines[:n-1]
	}
	begin, end := -1, -1
	for i, l := range lines {
		switch string(bytes.TrimRight(l, "\r\n")) {
		case Begin:
			if begin >= 0 {
				return nil, fmt.Errorf("%w: a second %q on line %d", ErrMarkers, Begin, i+1)
			}
			begin = i
		case End:
			if begin < 0 || end >= 0 {
				return nil, fmt.Errorf("%w: %q on line %d without its %q before it", ErrMarkers, End, i+1, Begin)
			}
			end = i
		}
	}
	if begin >= 0 && end < 0 {
		return nil, fmt.Errorf("%w: %q on line %d has no %q after it", ErrMarkers, Begin, begin+1, End)
	}
	var out bytes.Buffer
	if begin < 0 {
		out.Write(content)
		if len(block) > 0 {
			if len(content) > 0 && content[len(content)-1] != '\n' {
				out.WriteByte('\n')
			}
			out.Write(block)
		}
		return out.Bytes(), nil
	}
	for _, l := range lines[:begin] {
		out.Write(l)
	}
	out.Write(block)
	for _, l := range lines[end+1:] {
		out.Write(l)
	}
	return out.Bytes(), nil
}

// render returns the block for entries, markers included; nil for none.
func render(entries []spec.HostEntry) ([]byte, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	es := slices.Clone(entries)
	for i, e := range es {
		e.Name = spec.CanonicalName(e.Name)
		if err := spec.CheckName(e.Name); err != nil {
			return nil, fmt.Errorf("hostsblock: entry %d: name %q %v", i, e.Name, err)
		}
		if !e.Addr.IsValid() {
			return nil, fmt.Errorf("hostsblock: entry %d (%s): no address", i, e.Name)
		}
		es[i] = spec.HostEntry{Name: e.Name, Addr: e.Addr.Unmap()}
	}
	slices.SortFunc(es, func(a, b spec.HostEntry) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), a.Addr.Compare(b.Addr))
	})
	es = slices.Compact(es)
	var b bytes.Buffer
	b.WriteString(Begin + "\n")
	for _, e := range es {
		b.WriteString(e.Addr.String() + "\t" + e.Name + "\n")
	}
	b.WriteString(End + "\n")
	return b.Bytes(), nil
}

// Write makes the block of the hosts file at path hold entries (none:
// removes it), replacing the file atomically (atomicfile.Write: a
// temporary file beside it renamed over it) with the mode it had, and
// leaving it untouched when nothing changes. A missing file is an error:
// a host without a hosts file is not this package's to make.
//
// A file that is a mount point (a container's bind-mounted /etc/hosts)
// cannot be renamed over, and Write fails; another tool that rewrites the
// file between Write's read and its rename loses its change (and the next
// Write keeps its later one).
func Write(path string, entries []spec.HostEntry) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("reading hosts file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("hosts file %s is not a regular file", path)
	}
	old, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading hosts file: %w", err)
	}
	data, err := Splice(old, entries)
	if err != nil {
		return fmt.Errorf("hosts file %s: %w", path, err)
	}
	if bytes.Equal(data, old) {
		return nil
	}
	return atomicfile.Write(path, data, st.Mode().Perm())
}

// Remove removes the block from the hosts file at path, if it has one; a
// missing file has none.
func Remove(path string) error {
	err := Write(path, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
