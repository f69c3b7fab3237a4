//go:build !linux

package fullfs

import "errors"

var errLinuxOnly = errors.New("tmpfs mounts are Linux only")

func mount(dir, data string) error { return errLinuxOnly }
func unmount(dir string) error     { return errLinuxOnly }
func free(dir string) (int64, error) {
	return 0, errLinuxOnly
}
