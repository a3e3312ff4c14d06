package main

import (
	"golang.org/x/sys/unix"
)

// defaultHostProbe reads this host: statfs(2), getrlimit(2) and /proc/sys.
func defaultHostProbe() hostProbe {
	return hostProbe{
		statfs: func(dir string) (int64, int64, int64, error) {
			var st unix.Statfs_t
			if err := unix.Statfs(dir, &st); err != nil {
				return 0, 0, 0, err
			}
			bs := int64(st.Bsize)
			return int64(st.Type), int64(st.Blocks) * bs, int64(st.Bavail) * bs, nil
		},
		nofile: func() (uint64, uint64, error) {
			var rl unix.Rlimit
			err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
			return rl.Cur, rl.Max, err
		},
		sysctl: readSysctl,
		writable: func(dir string) error {
			return unix.Access(dir, unix.W_OK|unix.X_OK)
		},
	}
}
