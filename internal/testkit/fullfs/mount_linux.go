package fullfs

import "syscall"

func mount(dir, data string) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, data)
}

func unmount(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		// Something still holds a file open: detach it now; the kernel
		// frees it when the last user goes.
		return syscall.Unmount(dir, syscall.MNT_DETACH)
	}
	return nil
}

func free(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}
