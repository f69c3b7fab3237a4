package spec

import "maps"

// RedactedValue stands in for a value Redacted took out.
const RedactedValue = "(redacted)"

// Redacted returns a copy of d for showing outside the machine's root-only
// state: the values of every field SecretValues names (env, labels) are
// RedactedValue, their keys kept. d is not changed.
func (d *Declaration) Redacted() *Declaration {
	out := *d
	out.Containers = make([]Container, len(d.Containers))
	for i, c := range d.Containers {
		c.Env = redactValues(c.Env)
		c.Labels = redactValues(c.Labels)
		out.Containers[i] = c
	}
	return &out
}

func redactValues(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k := range out {
		out[k] = RedactedValue
	}
	return out
}
