package segment

import (
	"fmt"

	"github.com/seedqueue/sq/ring"
)

// dsyncWriter returns the backend as a ring.DsyncWriter when
// Options.DsyncWrites asks for dsync writes and the backend has them, nil
// otherwise (and under Options.DirectWrites, which ignores DsyncWrites).
func (l *Log) dsyncWriter() ring.DsyncWriter {
	if !l.opts.DsyncWrites || l.opts.DirectWrites {
		return nil
	}
	dw, _ := l.be.(ring.DsyncWriter)
	return dw
}

// writeData writes an append's bufs at pos of the active segment's file f:
// with RWF_DSYNC under Options.DsyncWrites (see dsyncWriter), a plain
// gather write otherwise. A failed dsync write may have failed in its
// sync, after which the kernel may have dropped the pages (see Sync): it
// puts the Log in the failed state and returns an error wrapping
// ErrFailed.
func (l *Log) writeData(f ring.File, bufs [][]byte, pos int64) (int64, error) {
	if l.opts.DirectWrites {
		if n, ok, err := l.writeDirect(f, bufs, pos); ok {
			return n, err
		}
	}
	dw := l.dsyncWriter()
	if dw == nil {
		return l.be.WriteAt(f, bufs, pos)
	}
	n, err := dw.WriteAtDsync(f, bufs, pos)
	if err != nil {
		err = fmt.Errorf("%w: write with RWF_DSYNC: %w", ErrFailed, err)
		l.mu.Lock()
		if l.failed == nil {
			l.failed = err
		}
		l.mu.Unlock()
	}
	return n, err
}
