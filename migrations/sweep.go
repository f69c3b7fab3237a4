package migrations

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"
)

// LabelProbeOwner names, on a probe container, the owner of the Runner that
// made it (RunnerConfig.Owner: the agent sets its machine's name). Only that
// owner sweeps it (see SweepProbes).
const LabelProbeOwner = LabelProbe + "-owner"

// UnownedProbeAge is the age past which a probe container without
// LabelProbeOwner (made by a meshhost before the label, or by `meshhost
// probe`, which sets no owner) is swept. A probe container lives at most
// its Runner's Timeout (30s by default) and its removal: one this old was
// left behind.
const UnownedProbeAge = 10 * time.Minute

// ProbeContainer is a container labelled LabelProbe.
type ProbeContainer struct {
	ID      string
	Name    string
	Labels  map[string]string
	State   string // "running", "exited", ...
	Created time.Time
}

// ProbeCleaner is what SweepProbes needs of the runtime; reconcile/podman's
// Runtime has it.
type ProbeCleaner interface {
	// ProbeContainers lists the containers labelled LabelProbe, in any
	// state, and only those.
	ProbeContainers(ctx context.Context) ([]ProbeContainer, error)
	// RemoveProbeContainer removes a container by force (killed at once if
	// it runs) with its anonymous volumes; one already gone is not an
	// error.
	RemoveProbeContainer(ctx context.Context, id string) error
}

// SweepProbes removes the probe containers that probe runs left behind
// (an agent killed with SIGKILL mid-probe leaves its probe container,
// running or exited, for ever): those labelled LabelProbeOwner=owner, and
// those without an owner label once older than UnownedProbeAge. It never
// touches a container without LabelProbe, nor another owner's probe
// containers. Each removal is logged with the container's name and why.
// It returns the names removed; the error joins every failure (a container
// it could not remove is left for the next sweep).
//
// The agent sweeps at start, before it probes anything, with its machine's
// name as owner; a Runner sweeps before each probe round (Probe), sparing
// the containers of its own rounds in flight.
func SweepProbes(ctx context.Context, rt ProbeCleaner, owner string, logger *slog.Logger) ([]string, error) {
	return sweepProbes(ctx, rt, owner, UnownedProbeAge, nil, time.Now(), logger)
}

// sweepProbes is SweepProbes, sparing the containers named in spare (a
// Runner's probes in flight), with unowned probe containers swept past
// unownedAge at now.
func sweepProbes(ctx context.Context, rt ProbeCleaner, owner string, unownedAge time.Duration, spare func(name string) bool, now time.Time, logger *slog.Logger) ([]string, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	list, err := rt.ProbeContainers(ctx)
	if err != nil {
		return nil, fmt.Errorf("looking for probe containers left behind: %w", err)
	}
	var removed []string
	var errs []error
	for _, c := range list {
		if _, ok := c.Labels[LabelProbe]; !ok {
			continue // never anything but a probe container
		}
		if spare != nil && spare(c.Name) {
			continue
		}
		var why string
		switch o, owned := c.Labels[LabelProbeOwner]; {
		case owned && o == owner && owner != "":
			why = fmt.Sprintf("a probe container of this machine (%s=%s) that no probe of this agent runs: left behind by a probe run that never finished (an agent killed mid-probe)", LabelProbeOwner, owner)
		case !owned && now.Sub(c.Created) > unownedAge:
			why = fmt.Sprintf("a probe container without %s, created %s ago (a probe container lives at most its probe timeout): left behind by an older meshhost or a `meshhost probe` that never finished", LabelProbeOwner, now.Sub(c.Created).Round(time.Second))
		default:
			continue // another machine's, or one that may still be running its probe
		}
		if err := rt.RemoveProbeContainer(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("removing probe container %s left behind: %w", c.Name, err))
			logger.Warn("cannot remove a probe container left behind; the next sweep tries again", "container", c.Name, "id", shortID(c.ID), "err", err)
			continue
		}
		removed = append(removed, c.Name)
		logger.Warn("removed a probe container left behind", "container", c.Name, "id", shortID(c.ID), "state", c.State,
			"created", c.Created.Format(time.RFC3339), "why", why)
	}
	return removed, errors.Join(errs...)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ImagePruner is what PruneProbeImages needs of the runtime:
// reconcile/podman's Runtime has it.
type ImagePruner interface {
	// ImageTags returns the names ("REPO:TAG") of the images in the
	// repository repo, exactly.
	ImageTags(ctx context.Context, repo string) ([]string, error)
	// RemoveImage removes an image name; an image a container uses stays.
	RemoveImage(ctx context.Context, ref string) error
}

// probeTag is the tag ProbeImage gives: 16 hex digits of the binary's hash.
var probeTag = regexp.MustCompile(`^[0-9a-f]{16}$`)

// PruneProbeImages removes the probe images of other probe binaries than
// the current one (keep, ProbeImage's result): every ProbeImageRepo:<16 hex
// digits> but keep. Images of any other repository or tag are never
// touched, and podman keeps an image a container still uses. Each removal
// is logged; it returns the names removed, and the error joins every
// failure.
func PruneProbeImages(ctx context.Context, rt ImagePruner, keep string, logger *slog.Logger) ([]string, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if tag, ok := strings.CutPrefix(keep, ProbeImageRepo+":"); !ok || !probeTag.MatchString(tag) {
		return nil, fmt.Errorf("pruning probe images: %q is not a probe image", keep)
	}
	tags, err := rt.ImageTags(ctx, ProbeImageRepo)
	if err != nil {
		return nil, fmt.Errorf("pruning probe images: %w", err)
	}
	slices.Sort(tags)
	var removed []string
	var errs []error
	for _, ref := range slices.Compact(tags) {
		tag, ok := strings.CutPrefix(ref, ProbeImageRepo+":")
		if !ok || !probeTag.MatchString(tag) || ref == keep {
			continue
		}
		if err := rt.RemoveImage(ctx, ref); err != nil {
			errs = append(errs, err)
			logger.Info("kept an old probe image", "image", ref, "err", err)
			continue
		}
		removed = append(removed, ref)
		logger.Info("removed an old probe image", "image", ref, "current", keep, "why", "made from another meshprobe binary than the current one")
	}
	return removed, errors.Join(errs...)
}
