package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/meshhost/meshhost/internal/agent/statedir"
	"github.com/meshhost/meshhost/resolver"
	"github.com/meshhost/meshhost/resolver/control"
	"github.com/meshhost/meshhost/spec"
)

// Where the agent's resolver is. The roster in force is the one the
// resolver serves, and the agent reads it from there: from its own
// process's resolver, or from meshhost-resolver over its control socket
// (whose roster is saved in that service's state directory, not the
// agent's). The agent records which in its state directory when it
// starts, so that the commands that need the roster in force (plan,
// explain, dns-check) read it where the agent does.

// EmbeddedResolver is the --resolver of a resolver in the agent's own
// process, which saves its roster in the agent's state directory
// (statedir.Dir.Roster).
const EmbeddedResolver = "embedded"

// ParseResolverAt reads a --resolver value: "embedded", or unix:PATH, the
// control socket of meshhost-resolver. It returns the socket's path, ""
// for embedded.
func ParseResolverAt(at string) (socket string, err error) {
	if at == EmbeddedResolver {
		return "", nil
	}
	socket, ok := strings.CutPrefix(at, "unix:")
	if !ok || socket == "" {
		return "", fmt.Errorf("--resolver %q: want embedded or unix:PATH", at)
	}
	return socket, nil
}

// resolverAtOf is the --resolver form of a resolver whose control socket
// is socket ("": embedded).
func resolverAtOf(socket string) string {
	if socket == "" {
		return EmbeddedResolver
	}
	return "unix:" + socket
}

// ResolverAt returns where the agent that last started on dir said its
// resolver is, in --resolver's form; an error when no agent recorded it
// (none ran on dir since meshhost recorded it).
func ResolverAt(dir statedir.Dir) (string, error) {
	data, err := os.ReadFile(dir.Resolver())
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s does not say where the agent's resolver is (the agent records it when it starts): start the agent, or pass --resolver embedded or --resolver unix:PATH", dir.Resolver())
	}
	if err != nil {
		return "", fmt.Errorf("reading where the agent's resolver is: %w", err)
	}
	at := strings.TrimSpace(string(data))
	if _, err := ParseResolverAt(at); err != nil {
		return "", fmt.Errorf("%s: %w", dir.Resolver(), err)
	}
	return at, nil
}

// recordResolverAt records in the state directory where Config.Resolver
// is: the control socket of a resolver service's client, or else this
// process. It writes nothing when the record says so already (on a full
// disk, a restart writes nothing). When it cannot be written, the old
// record is removed, so that the commands refuse to plan rather than read
// another resolver's roster.
func (a *Agent) recordResolverAt() {
	socket := ""
	if c, ok := a.cfg.Resolver.(*control.Client); ok {
		socket = c.Path()
	}
	dir, want := a.cfg.State, resolverAtOf(socket)
	if got, err := ResolverAt(dir); err == nil && got == want {
		return
	}
	if err := writeAtomic(dir.Resolver(), []byte(want+"\n")); err != nil {
		a.log.Error("recording where the resolver is: meshhost plan, explain and dns-check cannot read the roster in force until the agent starts again", "path", dir.Resolver(), "err", err)
		os.Remove(dir.Resolver())
	}
}

// ServedRoster returns the roster in force: the one the agent's resolver
// serves, read as the agent reads it. at is where the resolver is, in
// --resolver's form; "" takes what the agent recorded in dir (ResolverAt).
// It returns nil, nil when the resolver serves no roster yet, and an error
// when the roster in force cannot be had: nothing says where the resolver
// is, the resolver service does not answer, or the saved roster cannot be
// read. A caller must not take an error for "no roster".
func ServedRoster(ctx context.Context, dir statedir.Dir, at string) (*spec.Roster, error) {
	if at == "" {
		var err error
		if at, err = ResolverAt(dir); err != nil {
			return nil, err
		}
	}
	socket, err := ParseResolverAt(at)
	if err != nil {
		return nil, err
	}
	if socket == "" {
		r, err := resolver.LoadState(dir.Roster()) // the roster file and the deltas logged beside it
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("the embedded resolver's saved roster %s: %w", dir.Roster(), err)
		}
		return r, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	r, err := control.NewClient(control.ClientConfig{Path: socket}).RosterContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the roster from the resolver service (--resolver %s): %w", at, err)
	}
	return r, nil
}

// ServedGeneration returns the generation of the roster in force, as
// ServedRoster finds it but without carrying the roster over the resolver
// service's socket (0: none yet). `meshhost status` shows it.
func ServedGeneration(ctx context.Context, dir statedir.Dir) (uint64, error) {
	at, err := ResolverAt(dir)
	if err != nil {
		return 0, err
	}
	socket, err := ParseResolverAt(at)
	if err != nil {
		return 0, err
	}
	if socket == "" {
		r, err := ServedRoster(ctx, dir, at)
		if err != nil || r == nil {
			return 0, err
		}
		return r.Generation, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := control.NewClient(control.ClientConfig{Path: socket}).Status(ctx)
	if err != nil {
		return 0, fmt.Errorf("asking the resolver service (--resolver %s) for its roster: %w", at, err)
	}
	return st.Generation, nil
}
