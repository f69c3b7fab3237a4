package reconcile

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshhost/meshhost/digest"
	"github.com/meshhost/meshhost/spec"
)

// Kind is what an Action does.
type Kind string

const (
	// Keep: the container matches the declaration and runs; nothing to do.
	Keep Kind = "keep"
	// Create: no container has the name; create and start one.
	Create Kind = "create"
	// Start: the container matches but is not running; start it.
	Start Kind = "start"
	// Update: only settings podman changes in place (resources) differ;
	// update them (and start the container if it is not running).
	Update Kind = "update"
	// Replace: a create-time setting differs; replace the container
	// crash-safely, within the replacement budget. Reason and Changes
	// name every differing field.
	Replace Kind = "replace"
	// Remove: a managed container is no longer declared; stop and remove it
	// (never its volumes).
	Remove Kind = "remove"
	// Adopt: a container meshhost did not label (or labelled with a digest
	// version it does not know) matches the declaration field by field; it
	// becomes managed without being replaced.
	Adopt Kind = "adopt"
	// Resume: a replacement was interrupted after the old container was set
	// aside; finish it (create or start the new one, then remove the old).
	Resume Kind = "resume"
	// Rollback: a replacement was interrupted and cannot be finished as it
	// was; remove the new container, rename the old one back and start it.
	Rollback Kind = "rollback"
	// Conflict: a container meshhost does not manage holds a declared name
	// and differs from the declaration, or holds NAME+AsideSuffix, which
	// replacing the managed NAME needs. It is never touched; an operator
	// must remove or rename it.
	Conflict Kind = "conflict"
)

// kinds lists every Kind, for the metrics' labels.
var kinds = []Kind{Keep, Create, Start, Update, Replace, Remove, Adopt, Resume, Rollback, Conflict}

// Action is one step of a Plan, for one container name.
type Action struct {
	Kind Kind
	Name string // the declared (or, for Remove, current) container name
	// ID is the container now holding Name; empty for Create, and for
	// Resume and Rollback when the interrupted replacement created nothing.
	ID string
	// Running reports whether the container ID runs now.
	Running bool
	// Removing reports that container ID is in StateRemoving (a removal
	// of it began and was cut short): Remove only finishes the removal,
	// without stopping it first.
	Removing bool
	// StopTimeout is container ID's own stop timeout, read from its record
	// label (or inspection); zero when unknown, and Apply inspects it
	// before stopping.
	StopTimeout time.Duration
	// AsideID is the old container an interrupted replacement left under
	// Name+AsideSuffix (Resume, Rollback, Conflict).
	AsideID string
	// AsideStopTimeout is AsideID's own stop timeout, read from its record
	// label; zero when unknown. Resume stops the old container (it may have
	// been started since) before the new one starts.
	AsideStopTimeout time.Duration
	// Desired is the declared container; nil for Remove.
	Desired *spec.Rendered
	// Reason says why, for the log, the journal and the operator.
	Reason string
	// Changes are the differing fields (Replace, Update, Adopt, Conflict).
	Changes []digest.Change
	// DependsOn are the names this action waits for: the declared
	// dependencies, or for Remove the containers removed before it (its
	// dependants).
	DependsOn []string
	// adoptAs, for Adopt on a runtime without durable in-place updates
	// (Config.NoInPlaceUpdates), are the resources the container runs
	// with: recorded as its adoption's instead of updating them.
	adoptAs *spec.Resources
}

// Disrupts reports whether a takes a container that may run away from
// what it runs: a replacement, or a removal (not the finishing of one cut
// short, in which nothing runs any more). The replacement budget paces
// these (Budget), and the agent's blast-radius hold counts them: a
// running service removed is at least as disruptive as one replaced.
func (a Action) Disrupts() bool {
	return a.Kind == Replace || a.Kind == Remove && !a.Removing
}

// String reads like a line of a plan: `replace "gitea": image: a:1 -> a:2`.
func (a Action) String() string {
	if a.Reason == "" {
		return fmt.Sprintf("%s %q", a.Kind, a.Name)
	}
	return fmt.Sprintf("%s %q: %s", a.Kind, a.Name, a.Reason)
}

// Plan is what one pass will do: an Action for every declared container
// and every managed container no longer declared, in the order Apply runs
// them: removals first, dependants before their dependencies, then the
// declared containers, dependencies before their dependants.
type Plan struct {
	Actions []Action
	// Unmanaged counts containers neither declared nor managed: left alone.
	Unmanaged int
}

// Changes returns the actions that do something, in order.
func (p *Plan) Changes() []Action {
	var out []Action
	for _, a := range p.Actions {
		if a.Kind != Keep {
			out = append(out, a)
		}
	}
	return out
}

// Count returns how many actions are of kind k.
func (p *Plan) Count(k Kind) int {
	n := 0
	for _, a := range p.Actions {
		if a.Kind == k {
			n++
		}
	}
	return n
}

// String lists the changes one per line, or "no changes".
func (p *Plan) String() string {
	var b strings.Builder
	for _, a := range p.Changes() {
		b.WriteString(a.String())
		b.WriteByte('\n')
	}
	if b.Len() == 0 {
		return "no changes\n"
	}
	return b.String()
}

func joinChanges(cs []digest.Change) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// replaceChanges splits changes into those that need a replacement and
// those applied in place.
func splitChanges(cs []digest.Change) (replace, inPlace []digest.Change) {
	for _, c := range cs {
		switch c.Mutability {
		case spec.UpdateInPlace:
			inPlace = append(inPlace, c)
		case spec.OrderOnly:
		default:
			replace = append(replace, c)
		}
	}
	return replace, inPlace
}
