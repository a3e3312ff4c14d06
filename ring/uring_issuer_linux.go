package ring

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// wakeUserData is the user_data of the issuer's eventfd read; operation
// ids never reach it (see pendingTable.add).
const wakeUserData = closeUserData - 1

// issuer drives one ring from one goroutine locked to its OS thread
// (runtime.LockOSThread), the only task that ever submits to or waits on
// the ring. That is what IORING_SETUP_SINGLE_ISSUER requires (io_uring_enter
// from another task fails with EEXIST) and what IORING_SETUP_DEFER_TASKRUN
// builds on: completions are posted only while the issuer waits in
// io_uring_enter(2) with IORING_ENTER_GETEVENTS, so the kernel never
// interrupts a running thread to post them. Callers queue requests and
// wait for their completion; the issuer submits everything queued and waits
// for completions in the same io_uring_enter(2). A caller wakes an issuer
// that sleeps in the kernel by writing to an eventfd, which the issuer
// always has an IORING_OP_READ pending on.
//
// With IORING_SETUP_SQPOLL (and without DEFER_TASKRUN, which the kernel
// refuses together with it) the issuer is the same, but a kernel thread
// consumes the submission queue: the issuer enters only to wait, or with
// IORING_ENTER_SQ_WAKEUP when that thread sleeps (IORING_SQ_NEED_WAKEUP).
type issuer struct {
	r      *uring
	sqpoll bool
	efd    int
	limit  int // operations in flight at most, the eventfd read not counted

	mu       sync.Mutex
	queue    []*request // guarded by mu
	closed   bool       // guarded by mu
	sleeping atomic.Bool
	wakeBuf  [8]byte // the eventfd read's target; only the kernel writes it

	once   sync.Once
	exited chan struct{}
	cerr   error // set by the issuer before exited is closed
}

// request is one caller's submission waiting in the issuer's queue.
type request struct {
	ops []op
	c   *call
}

// newIssuer starts an issuer over a new ring of uringEntries SQEs set up
// with flags (IORING_SETUP_*) and, for SQPOLL, sqIdleMs. The ring is set up
// on the issuer's thread: with SINGLE_ISSUER the task that creates the ring
// is its only submitter.
func newIssuer(flags, sqIdleMs uint32) (*issuer, error) {
	i := &issuer{sqpoll: flags&ioringSetupSQPoll != 0, exited: make(chan struct{})}
	ready := make(chan error, 1)
	go i.run(flags, sqIdleMs, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return i, nil
}

// setup creates the ring and the eventfd on the calling (locked) thread.
func (i *issuer) setup(flags, sqIdleMs uint32) error {
	r, err := newRingFlags(uringEntries, flags, sqIdleMs)
	if err != nil {
		return err
	}
	if ok, why := opsSupported(r.fd, opName{ioringOpRead, "READ"}, opName{ioringOpWritev, "WRITEV"}, opName{ioringOpFsync, "FSYNC"}); !ok {
		r.unmap()
		unix.Close(r.fd)
		return fmt.Errorf("ring: io_uring: %s", why)
	}
	// Blocking, not EFD_NONBLOCK: io_uring completes a read of a
	// non-blocking file that has nothing with -EAGAIN instead of waiting.
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		r.unmap()
		unix.Close(r.fd)
		return os.NewSyscallError("eventfd", err)
	}
	i.r, i.efd = r, efd
	// In flight at most: one less than the SQ (the eventfd read takes a
	// slot), so neither the SQ nor the CQ (twice the SQ) can overflow.
	i.limit = int(r.sqEntries) - 1
	return nil
}

// run is the issuer goroutine. It keeps its thread locked until it exits,
// which ends the thread too: no other goroutine ever runs on a thread that
// owned a ring.
func (i *issuer) run(flags, sqIdleMs uint32, ready chan<- error) {
	runtime.LockOSThread()
	defer close(i.exited)
	if err := i.setup(flags, sqIdleMs); err != nil {
		ready <- err
		return
	}
	ready <- nil
	r := i.r
	var (
		inflight int        // operations submitted, not yet completed
		armed    bool       // the eventfd read is queued or in flight
		held     []*request // taken from the queue, waiting for room
	)
	tail := atomic.LoadUint32(r.sqTail)
	for {
		i.mu.Lock()
		held = append(held, i.queue...)
		i.queue = nil
		closed := i.closed
		i.mu.Unlock()
		for len(held) > 0 && inflight+len(held[0].ops) <= i.limit {
			q := held[0]
			held[0] = nil
			held = held[1:]
			first := r.pend.add(q.c, len(q.ops))
			for k, o := range q.ops {
				s := r.sqeAt(tail & r.sqMask)
				*s = uringSQE{opcode: o.opcode, flags: o.flags, fd: o.fd, off: o.off, opFlags: o.opFlags, userData: first + uint64(k)}
				if len(o.iov) > 0 {
					s.addr = uint64(uintptr(unsafe.Pointer(&o.iov[0])))
					s.len = uint32(len(o.iov))
				}
				*(*uint32)(unsafe.Add(r.sqArray, uintptr(tail&r.sqMask)*4)) = tail & r.sqMask
				tail++
			}
			inflight += len(q.ops)
		}
		if !armed && !closed {
			s := r.sqeAt(tail & r.sqMask)
			*s = uringSQE{opcode: ioringOpRead, fd: int32(i.efd), addr: uint64(uintptr(unsafe.Pointer(&i.wakeBuf[0]))), len: uint32(len(i.wakeBuf)), userData: wakeUserData}
			*(*uint32)(unsafe.Add(r.sqArray, uintptr(tail&r.sqMask)*4)) = tail & r.sqMask
			tail++
			armed = true
		}
		atomic.StoreUint32(r.sqTail, tail)
		if closed && inflight == 0 && len(held) == 0 {
			break
		}

		// Sleep in the kernel unless a request came in meanwhile; a caller
		// that finds sleeping set clears it and writes the eventfd.
		i.sleeping.Store(true)
		i.mu.Lock()
		more := len(i.queue) > 0 || i.closed != closed
		i.mu.Unlock()
		var minComplete uint32 = 1
		if more || (closed && !armed && inflight == 0) {
			i.sleeping.Store(false)
			minComplete = 0
		}
		enterFlags := uint32(ioringEnterGetEvents)
		toSubmit := tail - atomic.LoadUint32(r.sqHead)
		if i.sqpoll {
			toSubmit = 0
			if atomic.LoadUint32(r.sqFlags)&ioringSQNeedWakeup != 0 {
				enterFlags |= ioringEnterSQWakeup
			}
		}
		_, err := r.enter(toSubmit, minComplete, enterFlags)
		i.sleeping.Store(false)
		if err != nil && err != unix.EINTR && err != unix.EAGAIN && err != unix.EBUSY && !i.sqpoll {
			// Withdraw the SQEs the kernel did not consume and complete
			// them with the error; the consumed ones complete normally.
			head := atomic.LoadUint32(r.sqHead)
			for t := head; t != tail; t++ {
				id := r.sqeAt(t & r.sqMask).userData
				if id == wakeUserData {
					armed = false
				} else if r.pend.complete(id, -int32(err.(unix.Errno))) {
					inflight--
				}
			}
			tail = head
			atomic.StoreUint32(r.sqTail, tail)
		}
		head := atomic.LoadUint32(r.cqHead)
		ctail := atomic.LoadUint32(r.cqTail)
		for ; head != ctail; head++ {
			c := (*uringCQE)(unsafe.Add(r.cqes, uintptr(head&r.cqMask)*unsafe.Sizeof(uringCQE{})))
			if c.userData == wakeUserData {
				armed = false
			} else if r.pend.complete(c.userData, c.res) {
				inflight--
			}
		}
		atomic.StoreUint32(r.cqHead, head)
	}
	// Closing the ring cancels the pending eventfd read.
	r.unmap()
	if err := unix.Close(r.fd); err != nil {
		i.cerr = os.NewSyscallError("close io_uring", err)
	}
	unix.Close(i.efd)
}

// wake writes the eventfd, which completes the issuer's pending read.
func (i *issuer) wake() {
	one := [8]byte{1}
	for {
		if _, err := unix.Write(i.efd, one[:]); err != unix.EINTR {
			return
		}
	}
}

// submit queues ops (in order, so links hold) for the issuer, which submits
// them in one io_uring_enter(2), and waits until every one has completed.
// It returns the cqe.res of each, by index: the byte count or -errno.
func (i *issuer) submit(ops []op) ([]int32, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if len(ops) > i.limit {
		return nil, fmt.Errorf("ring: %d operations exceed the issuer's %d in flight", len(ops), i.limit)
	}
	q := &request{ops: ops, c: &call{done: make(chan struct{})}}
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return nil, errUringClosed
	}
	i.queue = append(i.queue, q)
	i.mu.Unlock()
	if i.sleeping.CompareAndSwap(true, false) {
		i.wake()
	}
	<-q.c.done
	runtime.KeepAlive(ops)
	return q.c.res, nil
}

// close refuses new submissions, lets the issuer finish what is queued and
// in flight, and waits for it to release the ring. It is idempotent.
func (i *issuer) close() error {
	i.once.Do(func() {
		i.mu.Lock()
		i.closed = true
		i.mu.Unlock()
		i.wake()
		<-i.exited
	})
	return i.cerr
}
