package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestInterruptContext checks the two-step stop of every command: the first
// SIGINT cancels the command's context with a cause that names the signal,
// the second calls exit(130) at once.
func TestInterruptContext(t *testing.T) {
	var mu sync.Mutex
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	ctx, stop := interruptContext(lockedWriter{&mu, &stderr}, func(code int) { exited <- code })
	defer stop()

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("the first SIGINT did not cancel the context")
	}
	sig, ok := interrupted(ctx)
	if !ok || sig != syscall.SIGINT {
		t.Fatalf("interrupted() = %v, %v; want SIGINT, true", sig, ok)
	}
	select {
	case code := <-exited:
		t.Fatalf("exit(%d) after the first signal", code)
	default:
	}

	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exited:
		if code != 130 {
			t.Errorf("exit(%d) after the second SIGINT, want 130", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("the second SIGINT did not exit")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(stderr.String(), "interrupted again") {
		t.Errorf("stderr %q does not say why sq exits", stderr.String())
	}
}

// TestInterruptStillStopping: a command that has not returned some time
// after the first SIGINT (a write to a stalled stdout cannot be
// interrupted) says so and how to exit at once, without exiting.
func TestInterruptStillStopping(t *testing.T) {
	var mu sync.Mutex
	var stderr bytes.Buffer
	exited := make(chan int, 1)
	ctx, stop := interruptContextHint(lockedWriter{&mu, &stderr}, func(code int) { exited <- code }, time.Millisecond)
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-ctx.Done()
	deadline := time.Now().Add(time.Minute) // guards against a hang only
	for {
		mu.Lock()
		got := stderr.String()
		mu.Unlock()
		if strings.Contains(got, "sq: still stopping after 1ms") && strings.Contains(got, "Ctrl-C again exits now") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stderr %q: no still-stopping line", got)
		}
		time.Sleep(time.Millisecond) // polling the buffer, not waiting for a state
	}
	select {
	case code := <-exited:
		t.Fatalf("exit(%d) without a second signal", code)
	default:
	}
}

func TestExitCode(t *testing.T) {
	var stderr bytes.Buffer
	if got := exitCode(context.Background(), nil, &stderr); got != 0 {
		t.Errorf("success: exit %d", got)
	}
	if got := exitCode(context.Background(), errors.New("boom"), &stderr); got != 1 || !strings.Contains(stderr.String(), "sq: boom") {
		t.Errorf("error: exit %d, stderr %q", got, stderr.String())
	}
	stderr.Reset()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errInterrupted{syscall.SIGTERM})
	if got := exitCode(ctx, context.Canceled, &stderr); got != 143 || stderr.Len() != 0 {
		t.Errorf("SIGTERM: exit %d, stderr %q; want 143 and nothing printed", got, stderr.String())
	}
	if got := exitCode(ctx, errors.New("commit failed"), &stderr); got != 143 || !strings.Contains(stderr.String(), "commit failed") {
		t.Errorf("SIGTERM with an error: exit %d, stderr %q", got, stderr.String())
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
