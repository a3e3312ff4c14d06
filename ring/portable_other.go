//go:build !linux

package ring

import "fmt"

// WriteAt writes bufs one after the other with pwrite(2) (File.WriteAt).
func (*Portable) WriteAt(f File, bufs [][]byte, off int64) (int64, error) {
	var total int64
	for _, b := range bufs {
		n, err := f.WriteAt(b, off+total)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// WriteAtDsync is WriteAt followed by File.Sync (fsync(2)): RWF_DSYNC is
// Linux-only.
func (p *Portable) WriteAtDsync(f File, bufs [][]byte, off int64) (int64, error) {
	n, err := p.WriteAt(f, bufs, off)
	if err == nil {
		err = f.Sync()
	}
	return n, err
}

// Sync calls File.Sync on every file (fsync(2): fdatasync is Linux-only).
func (*Portable) Sync(files ...File) error {
	var first error
	for _, f := range files {
		if err := f.Sync(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Allocate grows f to off+n bytes with ftruncate(2); it reserves no blocks.
func (*Portable) Allocate(f File, off, n int64) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ring: allocate: %w", err)
	}
	if fi.Size() >= off+n {
		return nil
	}
	return f.Truncate(off + n)
}

// Truncate calls ftruncate(2).
func (*Portable) Truncate(f File, size int64) error { return f.Truncate(size) }

// SyncFSReportsErrors reports false: syncfs(2) is used on Linux only.
func SyncFSReportsErrors() (bool, string) { return false, "syncfs is Linux-only" }
