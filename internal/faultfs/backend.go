package faultfs

import (
	"errors"

	"github.com/seedqueue/sq/ring"
)

// backendOf is FS.Backend: the write path of files opened through fs.
// Files not opened through an FS go straight to the inner backend.
type backendOf struct{ fs *FS }

// Name returns "faultfs+" and the inner backend's name.
func (b backendOf) Name() string { return "faultfs+" + b.fs.be.Name() }

// Close closes the inner backend.
func (b backendOf) Close() error { return b.fs.be.Close() }

// WriteAt writes through the inner backend (OpWrite). A partial failure
// writes the first half of the bytes.
func (b backendOf) WriteAt(f ring.File, bufs [][]byte, off int64) (int64, error) {
	ff, ok := f.(*File)
	if !ok {
		return b.fs.be.WriteAt(f, bufs, off)
	}
	fs := b.fs
	fs.mu.Lock()
	defer fs.mu.Unlock()
	err, partial := ff.guard(OpWrite)
	if err != nil && !partial {
		return 0, err
	}
	ff.n.load(ff.path)
	if partial {
		var total int64
		for _, x := range bufs {
			total += int64(len(x))
		}
		n, _ := fs.be.WriteAt(ff.f, prefix(bufs, total/2), off)
		return n, err
	}
	return fs.be.WriteAt(ff.f, bufs, off)
}

// WriteAtDsync is WriteAt (OpWrite) followed, if the write succeeded, by
// Sync of f (OpSync), so that an injected fault or the crash can hit
// either half; it makes faultfs a ring.DsyncWriter. The durable image
// taken is the whole file's, as Sync takes it: stronger than RWF_DSYNC,
// which covers only the bytes written, so a caller mixing plain and dsync
// writes in one file is not modelled exactly (segment's DsyncWrites writes
// all of a segment's data with it).
func (b backendOf) WriteAtDsync(f ring.File, bufs [][]byte, off int64) (int64, error) {
	n, err := b.WriteAt(f, bufs, off)
	if err != nil {
		return n, err
	}
	return n, b.Sync(f)
}

// prefix returns the first n bytes of bufs.
func prefix(bufs [][]byte, n int64) [][]byte {
	var out [][]byte
	for _, x := range bufs {
		if n <= 0 {
			break
		}
		k := min(int64(len(x)), n)
		out = append(out, x[:k])
		n -= k
	}
	return out
}

// Sync records each file's content as its durable image (OpSync per
// file); the real files are not fdatasynced. Every file is tried; the
// errors are joined.
func (b backendOf) Sync(files ...ring.File) error {
	var errs []error
	for _, f := range files {
		ff, ok := f.(*File)
		if !ok {
			errs = append(errs, b.fs.be.Sync(f))
			continue
		}
		b.fs.mu.Lock()
		err, _ := ff.guard(OpSync)
		if err == nil {
			err = ff.snapshot()
		}
		b.fs.mu.Unlock()
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Allocate preallocates through the inner backend (OpAllocate).
func (b backendOf) Allocate(f ring.File, off, n int64) error {
	ff, ok := f.(*File)
	if !ok {
		return b.fs.be.Allocate(f, off, n)
	}
	b.fs.mu.Lock()
	defer b.fs.mu.Unlock()
	if err, _ := ff.guard(OpAllocate); err != nil {
		return err
	}
	ff.n.load(ff.path)
	return b.fs.be.Allocate(ff.f, off, n)
}

// Truncate truncates through the inner backend (OpTruncate).
func (b backendOf) Truncate(f ring.File, size int64) error {
	ff, ok := f.(*File)
	if !ok {
		return b.fs.be.Truncate(f, size)
	}
	b.fs.mu.Lock()
	defer b.fs.mu.Unlock()
	if err, _ := ff.guard(OpTruncate); err != nil {
		return err
	}
	ff.n.load(ff.path)
	return b.fs.be.Truncate(ff.f, size)
}
