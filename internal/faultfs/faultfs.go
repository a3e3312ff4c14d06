package faultfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/seedqueue/sq/ring"
)

// ErrCrashed is the cause of every error returned after Crash (or the
// crash point of CrashAfter) and by files opened before the last Restore.
var ErrCrashed = errors.New("faultfs: crashed")

// FS is a ring.FS over the real directory tree under a root, with
// simulated durability (see the package doc). Use Backend for the write
// path. All methods are safe for concurrent use; calls are serialized.
type FS struct {
	root  string
	inner ring.FS
	be    ring.Backend

	mu      sync.Mutex
	gen     int             // incremented by Restore; older files are dead
	dirs    map[string]*dir // tracked directories by clean path
	rules   []*rule
	crashed bool
	crashAt int64 // crash at this counted call; 0 never
	count   int64 // counted (mutating) calls so far
	stats   Stats
}

// dir is a tracked directory: its entries now and at its last SyncDir.
type dir struct {
	cur, durable map[string]*node
}

// node is a file or directory (an inode).
type node struct {
	isDir  bool
	loaded bool   // synced holds the durable image; false: the file on disk is it
	synced []byte // content at the last sync (nil and loaded: empty)
}

// New returns an FS whose tracked tree is root (which must exist), doing
// its I/O through ring.OS and, for Backend, through backend (nil: the
// portable backend). Paths outside root pass through untracked.
func New(root string, backend ring.Backend) *FS {
	if backend == nil {
		backend = ring.NewPortable()
	}
	return &FS{root: filepath.Clean(root), inner: ring.OS, be: backend, dirs: map[string]*dir{}}
}

// Root returns the root of the tracked tree, as given to New but cleaned.
func (fs *FS) Root() string { return fs.root }

// Backend returns the ring.Backend of fs: writes, syncs, preallocation and
// truncation of files opened through fs, with the same crash and injection
// rules. Sync does not fdatasync the real file; it records the image.
func (fs *FS) Backend() ring.Backend { return backendOf{fs} }

// Crash freezes fs: every later call fails with ErrCrashed and changes
// nothing, until Restore.
func (fs *FS) Crash() {
	fs.mu.Lock()
	fs.crashed = true
	fs.mu.Unlock()
}

// CrashAfter makes the n-th counted call from now (n >= 1) crash fs: that
// call and every later one fail with ErrCrashed. Counted calls are the
// mutating ones: OpCreate, OpRemove, OpRename, OpMkdir, OpSyncDir,
// OpWrite, OpSync, OpAllocate, OpTruncate, OpLock. n <= 0 cancels.
func (fs *FS) CrashAfter(n int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if n <= 0 {
		fs.crashAt = 0
		return
	}
	fs.crashAt = fs.count + n
}

// Crashed reports whether fs has crashed.
func (fs *FS) Crashed() bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.crashed
}

// Counted returns the number of counted (mutating) calls so far.
func (fs *FS) Counted() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.count
}

// path returns the tracked form of name, or "" if it is outside the root.
func (fs *FS) path(name string) string {
	p := filepath.Clean(name)
	if p == fs.root || strings.HasPrefix(p, fs.root+string(filepath.Separator)) {
		return p
	}
	return ""
}

// dirOf returns the tracked directory p (a clean path under the root),
// adopting it from the disk on first use: every entry there is durable.
func (fs *FS) dirOf(p string) *dir {
	if d := fs.dirs[p]; d != nil {
		return d
	}
	d := &dir{cur: map[string]*node{}, durable: map[string]*node{}}
	if ents, err := os.ReadDir(p); err == nil {
		for _, e := range ents {
			n := &node{isDir: e.IsDir()}
			d.cur[e.Name()], d.durable[e.Name()] = n, n
		}
	}
	fs.dirs[p] = d
	return d
}

// lookup returns the node of tracked path p, adopting a file created
// behind fs's back as durable. It returns nil when p does not exist.
func (fs *FS) lookup(p string) *node {
	d := fs.dirOf(filepath.Dir(p))
	base := filepath.Base(p)
	if n := d.cur[base]; n != nil {
		return n
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	n := &node{isDir: fi.IsDir()}
	d.cur[base], d.durable[base] = n, n
	return n
}

// load captures the durable image of an adopted node before fs changes
// its file or unlinks its name.
func (n *node) load(p string) {
	if n == nil || n.loaded || n.isDir {
		return
	}
	b, err := os.ReadFile(p)
	if err == nil {
		n.synced = b
	}
	n.loaded = true
}

// check counts a call of kind op on path, applies the crash point and the
// rules, and returns the error the call must fail with (nil: proceed) and
// whether a write must be made partial. fs.mu is held.
func (fs *FS) check(op Op, path string) (error, bool) {
	fs.stats.Calls[opIndex(op)]++
	if op&Counted != 0 {
		fs.count++
		if fs.crashAt > 0 && fs.count >= fs.crashAt {
			fs.crashed = true
		}
	}
	if fs.crashed {
		return &os.PathError{Op: op.String(), Path: path, Err: ErrCrashed}, false
	}
	for _, r := range fs.rules {
		if err, partial, ok := r.fire(op, path); ok {
			return &os.PathError{Op: op.String(), Path: path, Err: err}, partial
		}
	}
	return nil, false
}

// Create creates or truncates name (ring.FS).
func (fs *FS) Create(name string) (ring.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpCreate, name); err != nil {
		return nil, err
	}
	p := fs.path(name)
	var n *node
	if p != "" {
		if n = fs.lookup(p); n != nil {
			n.load(p) // O_TRUNC changes the same inode
		}
	}
	f, err := fs.inner.Create(name)
	if err != nil {
		return nil, err
	}
	if p != "" && n == nil {
		n = &node{loaded: true}
		fs.dirOf(filepath.Dir(p)).cur[filepath.Base(p)] = n
	}
	return &File{fs: fs, f: f, n: n, gen: fs.gen, path: name}, nil
}

// Open opens name read-only (ring.FS).
func (fs *FS) Open(name string) (ring.File, error) { return fs.open(name, false) }

// OpenReadWrite opens name for reading and writing (ring.FS).
func (fs *FS) OpenReadWrite(name string) (ring.File, error) { return fs.open(name, true) }

func (fs *FS) open(name string, rw bool) (ring.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpOpen, name); err != nil {
		return nil, err
	}
	var f ring.File
	var err error
	if rw {
		f, err = fs.inner.OpenReadWrite(name)
	} else {
		f, err = fs.inner.Open(name)
	}
	if err != nil {
		return nil, err
	}
	var n *node
	if p := fs.path(name); p != "" {
		n = fs.lookup(p)
	}
	return &File{fs: fs, f: f, n: n, gen: fs.gen, path: name}, nil
}

// Remove removes a file or an empty directory (ring.FS); the removal is
// durable after SyncDir of its directory.
func (fs *FS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpRemove, name); err != nil {
		return err
	}
	p := fs.path(name)
	if p != "" {
		fs.lookup(p).load(p)
	}
	if err := fs.inner.Remove(name); err != nil {
		return err
	}
	if p != "" {
		delete(fs.dirOf(filepath.Dir(p)).cur, filepath.Base(p))
	}
	return nil
}

// Rename replaces newname with oldname (ring.FS); durable after SyncDir
// of both directories.
func (fs *FS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpRename, newname); err != nil {
		return err
	}
	po, pn := fs.path(oldname), fs.path(newname)
	var n *node
	if po != "" {
		n = fs.lookup(po)
		fs.capture(po) // a lost rename restores the old name with its content
	}
	if pn != "" {
		fs.lookup(pn).load(pn)
	}
	if err := fs.inner.Rename(oldname, newname); err != nil {
		return err
	}
	if po != "" {
		delete(fs.dirOf(filepath.Dir(po)).cur, filepath.Base(po))
	}
	if pn != "" {
		if n == nil {
			n = &node{loaded: true} // from outside the root: nothing durable
		}
		fs.dirOf(filepath.Dir(pn)).cur[filepath.Base(pn)] = n
	}
	return nil
}

// RemoveAll removes name and everything below it (ring.FS). The removal
// of name is durable after SyncDir of its parent; until then a crash
// brings name back with the durable content of everything below it.
func (fs *FS) RemoveAll(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpRemove, name); err != nil {
		return err
	}
	p := fs.path(name)
	if p != "" {
		fs.capture(p)
	}
	err := fs.inner.RemoveAll(name)
	if p != "" {
		fs.dropRemoved(p)
	}
	return err
}

// capture records the durable image of every file at or below tracked
// path p, adopting the directories on the way, before fs unlinks or
// moves them. fs.mu is held.
func (fs *FS) capture(p string) {
	fi, err := os.Lstat(p)
	if err != nil {
		return
	}
	n := fs.lookup(p)
	if !fi.IsDir() {
		n.load(p)
		return
	}
	fs.dirOf(p)
	ents, err := os.ReadDir(p)
	if err != nil {
		return
	}
	for _, e := range ents {
		fs.capture(filepath.Join(p, e.Name()))
	}
}

// dropRemoved updates the current entries of p's parent and of the
// tracked directories at or below p after a RemoveAll of p, which may
// have failed half-way: what is still on disk stays. fs.mu is held.
func (fs *FS) dropRemoved(p string) {
	for q, d := range fs.dirs {
		if q != p && !strings.HasPrefix(q, p+string(filepath.Separator)) {
			continue
		}
		if _, err := os.Stat(q); err != nil {
			d.cur = map[string]*node{}
			continue
		}
		fs.reconcile(q, d)
	}
	if _, err := os.Lstat(p); err != nil {
		delete(fs.dirOf(filepath.Dir(p)).cur, filepath.Base(p))
	}
}

// Lock opens or creates name and takes an exclusive flock(2) on it
// (ring.FS); the new name is durable after SyncDir of its directory.
func (fs *FS) Lock(name string) (ring.File, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpLock, name); err != nil {
		return nil, err
	}
	p := fs.path(name)
	var n *node
	if p != "" {
		n = fs.lookup(p)
	}
	f, err := fs.inner.Lock(name)
	if err != nil {
		return nil, err
	}
	if p != "" && n == nil {
		n = &node{loaded: true}
		fs.dirOf(filepath.Dir(p)).cur[filepath.Base(p)] = n
	}
	return &File{fs: fs, f: f, n: n, gen: fs.gen, path: name}, nil
}

// Statfs returns the space of the file system holding name (ring.FS).
func (fs *FS) Statfs(name string) (ring.DiskSpace, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpStatfs, name); err != nil {
		return ring.DiskSpace{}, err
	}
	return fs.inner.Statfs(name)
}

// ReadDir lists dir's entries, sorted (ring.FS).
func (fs *FS) ReadDir(dir string) ([]string, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpReadDir, dir); err != nil {
		return nil, err
	}
	return fs.inner.ReadDir(dir)
}

// MkdirAll creates dir and its missing parents (ring.FS); each new
// directory is durable after SyncDir of its parent.
func (fs *FS) MkdirAll(dirName string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpMkdir, dirName); err != nil {
		return err
	}
	p := fs.path(dirName)
	var missing []string
	for q := p; q != "" && q != fs.root; q = filepath.Dir(q) {
		if _, err := os.Stat(q); err == nil {
			break
		}
		missing = append(missing, q)
	}
	if len(missing) > 0 {
		fs.dirOf(filepath.Dir(missing[len(missing)-1])) // adopt before the change
	}
	if err := fs.inner.MkdirAll(dirName, perm); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		q := missing[i]
		fs.dirOf(filepath.Dir(q)).cur[filepath.Base(q)] = &node{isDir: true}
		fs.dirs[q] = &dir{cur: map[string]*node{}, durable: map[string]*node{}}
	}
	return nil
}

// SyncDir makes dir's current entries durable (ring.FS).
func (fs *FS) SyncDir(dirName string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpSyncDir, dirName); err != nil {
		return err
	}
	if _, err := os.Stat(dirName); err != nil {
		return err
	}
	if p := fs.path(dirName); p != "" {
		d := fs.dirOf(p)
		fs.reconcile(p, d)
		d.durable = make(map[string]*node, len(d.cur))
		for k, n := range d.cur {
			d.durable[k] = n
		}
	}
	return nil
}

// reconcile brings d's current entries in line with the directory on
// disk, for names created, renamed or removed with package os rather than
// through fs: vanished names are dropped, new ones adopted as they are.
func (fs *FS) reconcile(p string, d *dir) {
	ents, err := os.ReadDir(p)
	if err != nil {
		return
	}
	onDisk := make(map[string]bool, len(ents))
	for _, e := range ents {
		onDisk[e.Name()] = true
		if d.cur[e.Name()] == nil {
			d.cur[e.Name()] = &node{isDir: e.IsDir()}
		}
	}
	for name := range d.cur {
		if !onDisk[name] {
			delete(d.cur, name)
		}
	}
}

// Stat returns name's metadata (ring.FS).
func (fs *FS) Stat(name string) (os.FileInfo, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if err, _ := fs.check(OpStat, name); err != nil {
		return nil, err
	}
	return fs.inner.Stat(name)
}

// File is a file opened through an FS (ring.File). Its Fd is the real
// descriptor, so it can be mapped; writes through the mapping are not
// supported (SQ maps read-only).
type File struct {
	fs   *FS
	f    ring.File
	n    *node // nil outside the root
	gen  int
	path string
}

// guard checks f's call of kind op; fs.mu is held.
func (f *File) guard(op Op) (error, bool) {
	if f.gen != f.fs.gen {
		f.fs.stats.Calls[opIndex(op)]++
		return &os.PathError{Op: op.String(), Path: f.path, Err: ErrCrashed}, false
	}
	return f.fs.check(op, f.path)
}

// Close closes the real file. It is never refused.
func (f *File) Close() error { return f.f.Close() }

// Name returns the path the file was opened with.
func (f *File) Name() string { return f.f.Name() }

// Fd returns the real file descriptor.
func (f *File) Fd() uintptr { return f.f.Fd() }

// Stat returns the real file's metadata.
func (f *File) Stat() (os.FileInfo, error) { return f.f.Stat() }

// ReadAt reads at off (OpRead), counting the bytes read in Stats.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err, _ := f.guard(OpRead); err != nil {
		return 0, err
	}
	n, err := f.f.ReadAt(b, off)
	f.fs.stats.addRead(f.path, n)
	return n, err
}

// WriteAt writes at off (OpWrite). A partial failure writes half of b.
func (f *File) WriteAt(b []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	err, partial := f.guard(OpWrite)
	if err != nil && !partial {
		return 0, err
	}
	f.n.load(f.path)
	if partial {
		n, _ := f.f.WriteAt(b[:len(b)/2], off)
		return n, err
	}
	return f.f.WriteAt(b, off)
}

// Sync records the file's current content as its durable image (OpSync).
func (f *File) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err, _ := f.guard(OpSync); err != nil {
		return err
	}
	return f.snapshot()
}

// snapshot sets the node's image to the file's content; fs.mu is held.
func (f *File) snapshot() error {
	if f.n == nil {
		return nil
	}
	fi, err := f.f.Stat()
	if err != nil {
		return err
	}
	b := make([]byte, fi.Size())
	if n, err := f.f.ReadAt(b, 0); n != len(b) {
		return fmt.Errorf("faultfs: snapshot %s: %w", f.path, err)
	}
	f.n.synced, f.n.loaded = b, true
	return nil
}

// Truncate changes the file's size (OpTruncate).
func (f *File) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err, _ := f.guard(OpTruncate); err != nil {
		return err
	}
	f.n.load(f.path)
	return f.f.Truncate(size)
}

var _ io.ReaderAt = (*File)(nil)
