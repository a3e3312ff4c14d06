package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/seedqueue/sq/ring"
)

// FormatVersion is the on-disk format version this build writes and the
// newest it reads.
const FormatVersion = 1

// ErrDataDirLocked reports that another process holds the data directory.
var ErrDataDirLocked = errors.New("engine: data directory is locked by another sq-server")

// dirLock is an flock(2) on <data-dir>/LOCK, held while the engine runs
// (ring.FS.Lock). The kernel drops it when the process dies, so a crash
// never leaves a stale lock.
type dirLock struct{ f ring.File }

func lockDataDir(fs ring.FS, dir string) (*dirLock, error) {
	path := filepath.Join(dir, "LOCK")
	f, err := fs.Lock(path)
	if err != nil {
		if errors.Is(err, ring.ErrLocked) {
			holder, _ := ring.ReadFile(fs, path)
			return nil, fmt.Errorf("%w: %s (held by pid %s); stop that server or use another --data-dir",
				ErrDataDirLocked, path, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("engine: lock %s: %w", path, err)
	}
	// The pid is informational (for the message above): not synced.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

// release drops the lock by closing the file.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	return l.f.Close()
}

// checkFormatVersion writes format-version in a new directory and refuses
// a directory written by a newer format.
func checkFormatVersion(e *Engine) error {
	path := filepath.Join(e.opts.DataDir, "format-version")
	data, err := ring.ReadFile(e.opts.FS, path)
	if errors.Is(err, os.ErrNotExist) {
		return writeFileAtomic(e.opts.FS, path, []byte(strconv.Itoa(FormatVersion)+"\n"))
	}
	if err != nil {
		return err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("engine: %s: unreadable format version %q", path, strings.TrimSpace(string(data)))
	}
	if v > FormatVersion {
		return fmt.Errorf("engine: %s: data format version %d is newer than this server's %d; upgrade sq-server", path, v, FormatVersion)
	}
	return nil
}
