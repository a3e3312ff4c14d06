package testutil

import (
	"bytes"
	"sync"
)

// LogBuffer collects a process's output (as its cmd.Stdout or cmd.Stderr)
// and wakes waiters on every write, so a test waits for a log line by
// event, not by sleeping. Safe for concurrent use.
type LogBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// NewLogBuffer returns an empty LogBuffer.
func NewLogBuffer() *LogBuffer { return &LogBuffer{changed: make(chan struct{})} }

// Write appends p and wakes the waiters of Snapshot's channel. It never
// fails.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// Snapshot returns the text so far and a channel closed at the next write.
func (l *LogBuffer) Snapshot() (string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String(), l.changed
}

// String returns the text so far.
func (l *LogBuffer) String() string {
	s, _ := l.Snapshot()
	return s
}
