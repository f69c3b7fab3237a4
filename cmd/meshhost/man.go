package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/meshhost/meshhost/internal/plumbing/buildinfo"
)

func init() {
	register(command{name: "man", summary: "write meshhost's man pages, one per command, into --dir (make man)", hidden: true, define: defineMan})
}

// daemonPages are the commands that run as services: their pages are in
// section 8 (system administration), the rest in section 1.
var daemonPages = map[string]bool{"meshhost-agent": true, "meshhost-resolver": true}

// defineMan writes the man pages from the commands themselves, so that
// they list what --help lists: meshhost.1, meshhost-COMMAND.1, and the
// daemons' meshhost-agent.8 and meshhost-resolver.8. Each page has the
// sections Debian's pages carry (FILES, ENVIRONMENT, SIGNALS, EXIT STATUS)
// and nothing of the machine that wrote it: a default taken from the host
// (the machine name, the home directory) is described, not printed, and
// the date is $SOURCE_DATE_EPOCH's when it is set (scripts/deb sets the
// commit's).
func defineMan(env *environment, fs *flag.FlagSet) runner {
	dir := fs.String("dir", "man", "the `DIR` to write meshhost.1, meshhost-COMMAND.1 and the daemons' meshhost-COMMAND.8 into")
	return func(ctx context.Context, args []string) (int, error) {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return exitError, err
		}
		root := newRoot(ctx, env, &outcome{})
		if err := writeManTree(root, *dir, hostValues()); err != nil {
			return exitError, fmt.Errorf("writing the man pages: %w", err)
		}
		fmt.Fprintf(env.stdout, "man pages written to %s\n", *dir)
		return exitOK, nil
	}
}

// writeManTree writes the page of cmd and of each command under it into
// dir, with the defaults in host described rather than printed.
func writeManTree(cmd *cobra.Command, dir string, host []hostValue) error {
	if !cmd.IsAvailableCommand() && cmd.HasParent() || cmd.IsAdditionalHelpTopicCommand() {
		return nil
	}
	for _, c := range cmd.Commands() {
		if err := writeManTree(c, dir, host); err != nil {
			return err
		}
	}
	cmd.DisableAutoGenTag = true // the same pages from the same commands: no generation date
	for _, fl := range []*pflag.FlagSet{cmd.LocalFlags(), cmd.InheritedFlags()} {
		fl.VisitAll(func(f *pflag.Flag) { f.DefValue = describeHostValues(f.DefValue, host) })
	}
	name := strings.ReplaceAll(cmd.CommandPath(), " ", "-")
	section := "1"
	if daemonPages[name] {
		section = "8"
	}
	header := &doc.GenManHeader{Title: strings.ToUpper(name), Section: section, Source: "meshhost " + buildinfo.Get().Version, Manual: "meshhost manual"}
	var buf bytes.Buffer
	if err := doc.GenMan(cmd, header, &buf); err != nil {
		return err
	}
	// cobra names every page in SEE ALSO by this page's section: each
	// gets its own.
	page := seeAlso.ReplaceAllStringFunc(buf.String(), func(ref string) string {
		name := strings.ReplaceAll(ref[:strings.IndexByte(ref, '(')], `\-`, "-")
		if daemonPages[name] {
			return ref[:strings.IndexByte(ref, '(')] + "(8)"
		}
		return ref[:strings.IndexByte(ref, '(')] + "(1)"
	})
	page = insertManSections(page, manSections(name))
	return os.WriteFile(filepath.Join(dir, name+"."+section), []byte(page), 0o644)
}

// seeAlso matches a reference to a meshhost page: meshhost-agent(1).
var seeAlso = regexp.MustCompile(`meshhost(\\?-[a-z]+)*\([0-9]\)`)

// insertManSections puts extra before the page's SEE ALSO (at its end when
// it has none), where man-pages(7) orders them.
func insertManSections(page, extra string) string {
	if i := strings.Index(page, ".SH SEE ALSO"); i >= 0 {
		return page[:i] + extra + page[i:]
	}
	return page + extra
}

// manSections are the FILES, ENVIRONMENT, SIGNALS and EXIT STATUS
// sections of the page of the command called name (meshhost-agent, ...).
func manSections(name string) string {
	var b strings.Builder
	b.WriteString(".SH FILES\n")
	files := [][2]string{
		{"/etc/meshhost/agent.toml", "the agent's configuration (agent.toml(5))"},
		{"/etc/meshhost/declaration/", "the declarations the agent applies"},
		{"/var/lib/meshhost/", "the agent's state: saved declaration and roster, journal, migration state"},
		{"/run/meshhost/resolver.sock", "the resolver service's control socket, through which the agent feeds it"},
	}
	if name == "meshhost-resolver" {
		files = [][2]string{
			{"/etc/meshhost/resolver.toml", "the resolver service's configuration (resolver.toml(5)), which its unit names with --config"},
			{"/var/lib/meshhost-resolver/", "the resolver service's state (--state): the last good roster and the exposure, served from its start"},
			{"/run/meshhost/resolver.sock", "its control socket (--control)"},
			{"/run/meshhost/resolver-handover.sock", "its handover socket (--handover), through which a new resolver takes the running one's sockets"},
			{"/etc/resolv.conf", "the upstreams, when --upstream is not given (--resolv-conf)"},
		}
	}
	for _, f := range files {
		fmt.Fprintf(&b, ".TP\n.I %s\n%s\n", roffEscape(f[0]), roffEscape(f[1]))
	}
	b.WriteString(".SH ENVIRONMENT\n")
	env := [][2]string{
		{"MESHHOST_PODMAN_SOCKET, CONTAINER_HOST", "podman's API socket, when no --podman flag (or configuration) gives it"},
		{"NOTIFY_SOCKET", "set by systemd for a Type=notify service: the agent and the resolver report READY=1 and WATCHDOG=1 there"},
		{"JOURNAL_STREAM", "set by systemd: each log line then carries its priority for the journal"},
	}
	if name == "meshhost-resolver" {
		env = env[1:] // it never talks to podman
	}
	for _, e := range env {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roffEscape(e[0]), roffEscape(e[1]))
	}
	b.WriteString(".SH SIGNALS\n")
	switch name {
	case "meshhost-agent":
		b.WriteString(".TP\n.B SIGHUP\nreloads the declaration source and the log level (systemctl reload meshhost\\-agent); the configuration's other keys take effect at the next start.\n")
		b.WriteString(".TP\n.BR SIGTERM \", \" SIGINT\nstop the agent; the containers keep running, and so does the resolver service.\n")
		b.WriteString(".TP\n.B SIGUSR1\nempties the embedded resolver's cache (--resolver embedded).\n")
	case "meshhost-resolver":
		b.WriteString(".TP\n.B SIGHUP\nreloads the roster file (\\-\\-roster); without one it changes nothing.\n")
		b.WriteString(".TP\n.B SIGUSR1\nempties the cache.\n")
		b.WriteString(".TP\n.BR SIGTERM \", \" SIGINT\nstop the resolver; under systemd its sockets stay in the service's file descriptor store, and queries wait in them for the next start.\n")
	default:
		b.WriteString("SIGINT and SIGTERM cancel the command: it stops what it was doing, changes nothing further, and exits with a status other than 0.\n")
	}
	b.WriteString(".SH EXIT STATUS\n")
	for _, c := range exitCodes {
		// meshhost-resolver refuses its own configuration (resolver.toml,
		// its flags) with exitConfig too.
		if len(c.only) == 0 || name == "meshhost" || slices.Contains(c.only, name) || c.code == exitConfig && name == "meshhost-resolver" {
			fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", c.code, roffEscape(c.meaning))
		}
	}
	return b.String()
}

// exitCodes is the table of exit codes, the same for every command; only,
// when set, names the pages of the commands that exit with the code (the
// root page lists them all).
var exitCodes = []struct {
	code    int
	meaning string
	only    []string
}{
	{exitOK, "success", nil},
	{exitError, "an error: a dependency missing (podman's socket, for an operator command), a file that cannot be read", nil},
	{exitChanges, "meshhost plan: the plan has changes", []string{"meshhost-plan"}},
	{exitProbe, "meshhost probe, meshhost dns-check: a probe or a lookup failed", []string{"meshhost-probe", "meshhost-dns-check"}},
	{exitUsage, "usage: a flag, an argument or a value the command does not take (sysexits' EX_USAGE)", nil},
	{exitConfig, "the configuration is refused (meshhost agent, meshhost config check, or a command reading a broken agent.toml), every fault named with its file and line; the agent's unit does not restart for it (sysexits' EX_CONFIG)", configPages()},
}

// configPages are the pages of the commands that exit exitConfig: the
// agent, config check, and those that read the agent's configuration.
func configPages() []string {
	pages := []string{"meshhost-agent", "meshhost-config"}
	for name := range operatorConfigKeys {
		pages = append(pages, "meshhost-"+name)
	}
	return pages
}

// roffEscape makes s safe as roff text: backslashes and dashes escaped, no
// line starting with a dot or a quote.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// hostValue is a value of the machine a page is written on, and how a page
// describes it instead. A name is replaced only where it is a default
// whole; a path also where a default holds it.
type hostValue struct {
	value, description string
	path               bool
}

// hostValues are the values of this machine that a flag's default may be
// made of, longest first (a home directory before the current directory
// that holds it).
func hostValues() []hostValue {
	var vs []hostValue
	add := func(v, desc string, path bool) {
		if v != "" && v != "/" {
			vs = append(vs, hostValue{v, desc, path})
		}
	}
	add(defaultMachine(), "the host name (lowercase, up to its first dot)", false)
	if h, err := os.Hostname(); err == nil {
		add(h, "the host name", false)
	}
	if u, err := user.Current(); err == nil {
		add(u.Username, "the user name", false)
	}
	if h, err := os.UserHomeDir(); err == nil {
		add(h, "$HOME", true)
	}
	if d, err := os.Getwd(); err == nil {
		add(d, "the current directory", true)
	}
	slices.SortStableFunc(vs, func(a, b hostValue) int { return len(b.value) - len(a.value) })
	return vs
}

// describeHostValues is def with the host values in it described.
func describeHostValues(def string, host []hostValue) string {
	for _, h := range host {
		if def == h.value {
			return h.description
		}
	}
	for _, h := range host {
		if h.path {
			def = strings.ReplaceAll(def, h.value, h.description)
		}
	}
	return def
}
