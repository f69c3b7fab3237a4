package main

import (
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagValueNames: the help of every flag reads right. pflag takes the
// first back-quoted word of a usage as the flag's value name, so
// "until `meshhost approve GEN`" rendered as
// `--hold-above meshhost approve GEN`: a value name is one word, and no
// back-quote is left in the text.
func TestFlagValueNames(t *testing.T) {
	root := newRoot(context.Background(), &environment{getenv: func(string) string { return "" }}, &outcome{})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			t.Run(c.Name()+"/"+f.Name, func(t *testing.T) {
				name, usage := pflag.UnquoteUsage(f)
				if strings.ContainsAny(name, " `") {
					t.Errorf("--%s's value name is %q, not one word: %q", f.Name, name, f.Usage)
				}
				if strings.Contains(usage, "`") {
					t.Errorf("--%s's help shows a back-quote: %q", f.Name, usage)
				}
			})
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
