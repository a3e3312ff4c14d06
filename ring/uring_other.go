//go:build !linux

package ring

import "errors"

// Probe reports that io_uring is unavailable: it is Linux-only.
func Probe() (ok bool, reason string) { return false, "io_uring is Linux-only" }

// NewUring fails: io_uring is Linux-only.
func NewUring() (Backend, error) { return nil, errors.New("ring: io_uring is Linux-only") }

// NewUringWith fails: io_uring is Linux-only.
func NewUringWith(UringOptions) (Backend, error) {
	return nil, errors.New("ring: io_uring is Linux-only")
}
