//go:build !linux

package main

import (
	"errors"
	"io/fs"
)

// errNotLinux is the error of the host readers off Linux: the checks are
// of Linux hosts.
var errNotLinux = errors.New("host checks need Linux")

// defaultHostProbe off Linux reads nothing: every check reports the
// reader's error or, for sysctls, their absence.
func defaultHostProbe() hostProbe {
	return hostProbe{
		statfs:   func(string) (int64, int64, int64, error) { return 0, 0, 0, errNotLinux },
		nofile:   func() (uint64, uint64, error) { return 0, 0, errNotLinux },
		sysctl:   func(string) (string, error) { return "", fs.ErrNotExist },
		writable: func(string) error { return errNotLinux },
	}
}
