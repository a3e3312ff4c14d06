package faultfs

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
)

// Restore rewrites the tracked tree to its durable state, as a machine
// restarting after a power cut would find it, and then forgets all state:
// the FS works again, its rules and crash point are cleared, and files
// opened before fail with ErrCrashed. Call it after Crash and after the
// code under test has closed what it could (its calls fail meanwhile).
//
// With rng nil only synced bytes survive. With rng, each file keeps a
// random prefix of the bytes it held at the crash over its synced image (a
// torn write): byte i is the crash-time byte for i < k and the synced byte
// otherwise, for a random k up to the crash-time size.
func (fs *FS) Restore(rng *rand.Rand) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	paths := make([]string, 0, len(fs.dirs))
	for p := range fs.dirs {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, func(a, b string) int { return len(a) - len(b) })
	// Images first, while the crash-time files are still in place.
	type write struct {
		path string
		data []byte
	}
	var writes []write
	for _, p := range paths {
		d := fs.dirs[p]
		if !fs.alive(p) {
			continue
		}
		for name, n := range d.durable {
			full := filepath.Join(p, name)
			if n.isDir {
				continue
			}
			if !n.loaded && d.cur[name] == n {
				continue // adopted and never changed: the file on disk is it
			}
			img := n.synced
			if rng != nil && d.cur[name] == n {
				img = torn(rng, n.synced, full)
			}
			writes = append(writes, write{full, img})
		}
	}
	var errs []error
	for _, p := range paths {
		d := fs.dirs[p]
		for name, n := range d.cur {
			if d.durable[name] != n {
				errs = append(errs, ignoreMissing(os.RemoveAll(filepath.Join(p, name))))
			}
		}
		if !fs.alive(p) {
			continue
		}
		for name, n := range d.durable {
			if n.isDir {
				errs = append(errs, os.MkdirAll(filepath.Join(p, name), 0o755))
			}
		}
	}
	for _, w := range writes {
		errs = append(errs, os.WriteFile(w.path, w.data, 0o644))
	}
	fs.gen++
	fs.dirs = map[string]*dir{}
	fs.rules = nil
	fs.crashed, fs.crashAt, fs.count = false, 0, 0
	return errors.Join(errs...)
}

// alive reports whether tracked directory p survives the crash: it is the
// root or durably entered, as a directory, in a surviving parent (or
// unknown to a tracked parent: made with package os).
func (fs *FS) alive(p string) bool {
	for p != fs.root {
		parent := filepath.Dir(p)
		if parent == p {
			return false
		}
		if d := fs.dirs[parent]; d != nil {
			base := filepath.Base(p)
			n := d.durable[base]
			if n == nil && d.cur[base] != nil || n != nil && !n.isDir {
				return false
			}
			if n == nil {
				// Neither durable nor current: made with package os, so
				// outside the simulation; kept if it is still there.
				if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
					return false
				}
			}
		}
		p = parent
	}
	return true
}

// torn returns synced overlaid with a random prefix of the file at path.
func torn(rng *rand.Rand, synced []byte, path string) []byte {
	now, err := os.ReadFile(path)
	if err != nil || len(now) == 0 {
		return synced
	}
	k := rng.IntN(len(now) + 1)
	out := make([]byte, max(len(synced), k))
	copy(out, synced)
	copy(out, now[:k])
	return out
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
