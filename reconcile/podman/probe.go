package podman

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"

	"github.com/meshhost/meshhost/reconcile"
	"github.com/meshhost/meshhost/spec"
)

// This file is what the reachability probe (package migrations) needs of
// podman besides the reconciler's Runtime: run a short-lived container to
// completion and read its output, and import the probe's image from a tar.

// removeTimeout bounds the removal of a one-shot container once its run is
// over, whatever became of the caller's context.
const removeTimeout = 30 * time.Second

// RunOnce creates a container with exactly the settings of rendered, starts
// it, waits for it to exit and returns its exit code and output (standard
// output, then standard error). The container is removed (by force) on
// every path, cancellation included. The context bounds the whole run: a
// container still running when it ends is killed and removed.
func (r *Runtime) RunOnce(ctx context.Context, rendered spec.Rendered) (exitCode int, output string, err error) {
	id, err := r.Create(ctx, rendered)
	if err != nil {
		return -1, "", err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
		defer cancel()
		if rerr := r.RemoveOneShot(rctx, id); rerr != nil {
			err = errors.Join(err, fmt.Errorf("removing one-shot container %s: %w", rendered.Name, rerr))
		}
	}()
	if err := r.Start(ctx, id); err != nil {
		return -1, "", err
	}
	code, err := containers.Wait(r.call(ctx, "Wait"), id, nil)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return -1, "", fmt.Errorf("waiting for container %s: %w", rendered.Name, mapError(err))
	}
	out, err := r.logs(ctx, id)
	if err != nil {
		return int(code), out, fmt.Errorf("reading the output of container %s: %w", rendered.Name, err)
	}
	return int(code), out, nil
}

// RemoveOneShot removes a one-shot container (RunOnce's, such as a probe
// left behind by a killed agent) by force: killed at once if it runs, with
// its anonymous volumes (never a named one). A container already gone is
// not an error. It is not for managed containers, which stop with their own
// signal and timeout (Stop, Remove).
func (r *Runtime) RemoveOneShot(ctx context.Context, id string) error {
	opts := new(containers.RemoveOptions).WithForce(true).WithVolumes(true).WithTimeout(0).WithIgnore(true)
	reports, err := containers.Remove(r.call(ctx, "Remove"), id, opts)
	if err == nil {
		for _, rep := range reports {
			if rep.Err != nil {
				err = rep.Err
				break
			}
		}
	}
	if err != nil {
		if err = mapError(err); errors.Is(err, reconcile.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("removing container %s: %w", id, err)
	}
	return nil
}

// Labelled is a container found by a label (ListLabelled).
type Labelled struct {
	ID      string
	Name    string
	Image   string
	Labels  map[string]string
	State   reconcile.State
	Created time.Time
}

// ListLabelled returns every container, running or not, that carries the
// label key, whatever its value, in one call.
func (r *Runtime) ListLabelled(ctx context.Context, key string) ([]Labelled, error) {
	opts := new(containers.ListOptions).WithAll(true).WithFilters(map[string][]string{"label": {key}})
	list, err := containers.List(r.call(ctx, "List"), opts)
	if err != nil {
		return nil, fmt.Errorf("listing containers labelled %s: %w", key, mapError(err))
	}
	out := make([]Labelled, 0, len(list))
	for _, c := range list {
		if _, ok := c.Labels[key]; !ok {
			continue // the filter is podman's; the promise is ours
		}
		l := Labelled{ID: c.ID, Image: c.Image, Labels: c.Labels, State: state(c.State), Created: c.Created}
		if len(c.Names) > 0 {
			l.Name = c.Names[0]
		}
		out = append(out, l)
	}
	return out, nil
}

// logs returns the whole output of an exited container: standard output,
// then standard error.
func (r *Runtime) logs(ctx context.Context, id string) (string, error) {
	stdout, stderr := make(chan string, 16), make(chan string, 16)
	var outB, errB strings.Builder
	var wg sync.WaitGroup
	wg.Go(func() {
		for s := range stdout {
			outB.WriteString(s)
		}
	})
	wg.Go(func() {
		for s := range stderr {
			errB.WriteString(s)
		}
	})
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithFollow(false)
	err := containers.Logs(r.call(ctx, "Logs"), id, opts, stdout, stderr)
	close(stdout)
	close(stderr)
	wg.Wait()
	if err != nil {
		return outB.String() + errB.String(), mapError(err)
	}
	return outB.String() + errB.String(), nil
}

// ImportImage makes an image named ref from tar, a tar of a root file
// system (`podman import`), and returns its ID. Nothing is pulled.
func (r *Runtime) ImportImage(ctx context.Context, tar io.Reader, ref string) (string, error) {
	rep, err := images.Import(r.call(ctx, "ImportImage"), tar, new(images.ImportOptions).WithReference(ref))
	if err != nil {
		return "", fmt.Errorf("importing image %s: %w", ref, err)
	}
	return rep.Id, nil
}

// ImageExists reports whether podman has an image named ref.
func (r *Runtime) ImageExists(ctx context.Context, ref string) (bool, error) {
	ok, err := images.Exists(r.call(ctx, "ImageExists"), ref, nil)
	if err != nil {
		return false, fmt.Errorf("looking up image %s: %w", ref, err)
	}
	return ok, nil
}

// ImageTags returns the names ("REPO:TAG") of the images podman has in the
// repository repo, exactly: "localhost/meshhost-probe" never matches
// "localhost/meshhost-probe-x:1".
func (r *Runtime) ImageTags(ctx context.Context, repo string) ([]string, error) {
	list, err := images.List(r.call(ctx, "ImageList"), nil)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	var out []string
	for _, img := range list {
		for _, tag := range img.RepoTags {
			if name, _, ok := strings.Cut(tag, "@"); ok {
				tag = name
			}
			if i := strings.LastIndex(tag, ":"); i > 0 && tag[:i] == repo && !strings.Contains(tag[i+1:], "/") {
				out = append(out, tag)
			}
		}
	}
	return out, nil
}

// RemoveImage removes the image named ref; a missing image is not an error.
// It never removes containers: an image in use stays.
func (r *Runtime) RemoveImage(ctx context.Context, ref string) error {
	_, errs := images.Remove(r.call(ctx, "RemoveImage"), []string{ref}, new(images.RemoveOptions).WithIgnore(true))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("removing image %s: %w", ref, err)
	}
	return nil
}
