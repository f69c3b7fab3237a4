package reconcile

import (
	"maps"
	"slices"
)

// dependenciesFirst returns the keys of nodes so that every node comes
// after the nodes it depends on (dependencies outside nodes are ignored),
// and otherwise in name order. A cycle, which declaration validation
// rejects, is broken at an arbitrary but deterministic point.
func dependenciesFirst[T any](nodes map[string]T, deps func(T) []string) []string {
	names := slices.Sorted(maps.Keys(nodes))
	order := make([]string, 0, len(names))
	const (
		unseen = iota
		visiting
		done
	)
	state := make(map[string]uint8, len(names))
	var visit func(string)
	visit = func(n string) {
		state[n] = visiting
		ds := deps(nodes[n])
		if !slices.IsSorted(ds) {
			ds = sortedCopy(ds)
		}
		for _, d := range ds {
			if _, ok := nodes[d]; ok && state[d] == unseen {
				visit(d)
			}
		}
		state[n] = done
		order = append(order, n)
	}
	for _, n := range names {
		if state[n] == unseen {
			visit(n)
		}
	}
	return order
}

func sortedCopy(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
