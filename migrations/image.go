package migrations

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// ProbeImageRepo is the local repository of probe images; the tag is the
// probe binary's content hash, so an image is made once per binary.
const ProbeImageRepo = "localhost/meshhost-probe"

// ProbeBinaryPath is where the probe binary sits inside the probe image.
const ProbeBinaryPath = "/meshprobe"

// EnvProbeBinary names the environment variable that points at the
// meshprobe binary (see FindProbeBinary).
const EnvProbeBinary = "MESHHOST_PROBE_BINARY"

// ImageRuntime is what ProbeImage needs of the runtime: reconcile/podman's
// Runtime has it.
type ImageRuntime interface {
	ImageExists(ctx context.Context, ref string) (bool, error)
	ImportImage(ctx context.Context, tar io.Reader, ref string) (id string, err error)
}

// ProbeImage makes sure the runtime has the probe image of the static
// binary at path and returns its name, ProbeImageRepo:<first 16 hex digits
// of the binary's SHA-256>. The image holds the binary alone (no base, no
// registry: `podman import` of a tar); it is imported only when the runtime
// does not have that tag yet.
func ProbeImage(ctx context.Context, rt ImageRuntime, path string) (string, error) {
	bin, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the probe binary: %w", err)
	}
	if err := checkStatic(path, bin); err != nil {
		return "", err
	}
	sum := sha256.Sum256(bin)
	ref := ProbeImageRepo + ":" + hex.EncodeToString(sum[:8])
	ok, err := rt.ImageExists(ctx, ref)
	if err != nil {
		return "", err
	}
	if ok {
		return ref, nil
	}
	tarball, err := probeTar(bin)
	if err != nil {
		return "", err
	}
	if _, err := rt.ImportImage(ctx, bytes.NewReader(tarball), ref); err != nil {
		return "", err
	}
	return ref, nil
}

// probeTar is the probe image's root file system: the binary, and the
// empty /etc files the runtime mounts its own over.
func probeTar(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	entries := []struct {
		hdr  tar.Header
		data []byte
	}{
		{tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}, nil},
		{tar.Header{Name: "etc/hosts", Typeflag: tar.TypeReg, Mode: 0o644}, nil},
		{tar.Header{Name: "etc/resolv.conf", Typeflag: tar.TypeReg, Mode: 0o644}, nil},
		{tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777}, nil},
		{tar.Header{Name: ProbeBinaryPath[1:], Typeflag: tar.TypeReg, Mode: 0o755}, bin},
	}
	for _, e := range entries {
		h := e.hdr
		h.Size = int64(len(e.data))
		h.ModTime = epoch
		if err := tw.WriteHeader(&h); err != nil {
			return nil, fmt.Errorf("writing the probe image: %w", err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("writing the probe image: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("writing the probe image: %w", err)
	}
	return buf.Bytes(), nil
}

// FindProbeBinary returns the meshprobe binary to make the probe image
// from: $MESHHOST_PROBE_BINARY, else meshprobe next to the running
// executable, else meshprobe on $PATH.
func FindProbeBinary() (string, error) {
	if p := os.Getenv(EnvProbeBinary); p != "" {
		return p, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "meshprobe")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("meshprobe"); err == nil {
		return p, nil
	}
	return "", errors.New("no meshprobe binary: build it (CGO_ENABLED=0 go build -trimpath -o meshprobe ./cmd/meshprobe) next to meshhost, or set " + EnvProbeBinary)
}

// checkStatic refuses a dynamically linked probe binary: the probe image has
// no libc, and such a binary fails inside it with a bare "no such file or
// directory", which would read as an unreachable resolver.
func checkStatic(path string, bin []byte) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("the probe binary %s is not an ELF executable: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("the probe binary %s is dynamically linked; build it with CGO_ENABLED=0 go build ./cmd/meshprobe", path)
		}
	}
	return nil
}
