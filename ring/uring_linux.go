package ring

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI, from <linux/io_uring.h> (Linux 6.x uapi) and the man
// pages io_uring_setup(2), io_uring_enter(2) and io_uring_register(2).
// Only what this backend uses is declared; x/sys/unix provides just the
// syscall numbers (SYS_IO_URING_SETUP, _ENTER, _REGISTER).
const (
	// mmap offsets of the rings and the SQE array (io_uring_setup(2)).
	ioringOffSQRing = 0
	ioringOffCQRing = 0x8000000
	ioringOffSQEs   = 0x10000000

	// io_uring_params.features bits.
	ioringFeatSingleMmap = 1 << 0 // SQ and CQ rings share one mapping (5.4)
	ioringFeatNoDrop     = 1 << 1 // completions are never dropped (5.5)

	// io_uring_params.flags (IORING_SETUP_*), from include/uapi/linux/io_uring.h
	// and io_uring_setup(2).
	ioringSetupSQPoll       = 1 << 1  // a kernel thread polls the SQ (5.1; unprivileged since 5.11)
	ioringSetupSingleIssuer = 1 << 12 // only the creating task submits (6.0)
	ioringSetupDeferTaskrun = 1 << 13 // task work runs only in io_uring_enter(GETEVENTS) (6.1)

	// io_uring_sqring flags word (IORING_SQ_*): the SQPOLL thread sleeps.
	ioringSQNeedWakeup = 1 << 0

	// io_uring_enter(2) flags.
	ioringEnterGetEvents = 1 << 0
	ioringEnterSQWakeup  = 1 << 1 // wake the SQPOLL thread

	// Opcodes (enum io_uring_op).
	ioringOpNop    = 0
	ioringOpWritev = 2
	ioringOpFsync  = 3
	ioringOpRead   = 22 // IORING_OP_READ (5.6)

	// io_uring_sqe.flags: the next SQE starts only after this one
	// succeeds; a failure or short read/write cancels it with -ECANCELED.
	iosqeIOLink = 1 << 2

	// io_uring_sqe.fsync_flags: fdatasync(2) semantics.
	ioringFsyncDatasync = 1 << 0

	// io_uring_register(2) opcode and io_uring_probe_op.flags bit.
	ioringRegisterProbe = 8
	ioUringOpSupported  = 1 << 0

	// uringEntries is the submission queue size; the completion queue is
	// twice as large (the kernel's default).
	uringEntries = 256
)

// uringParams is struct io_uring_params (120 bytes).
type uringParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

// sqringOffsets is struct io_sqring_offsets: byte offsets of the SQ ring's
// fields in its mapping.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets.
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// uringSQE is struct io_uring_sqe (64 bytes); opFlags is the union holding
// rw_flags and fsync_flags.
type uringSQE struct {
	opcode      uint8
	flags       uint8
	ioprio      uint16
	fd          int32
	off         uint64
	addr        uint64
	len         uint32
	opFlags     uint32
	userData    uint64
	bufIndex    uint16
	personality uint16
	spliceFdIn  int32
	pad         [2]uint64
}

// uringCQE is struct io_uring_cqe (16 bytes).
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// Compile-time size checks against the C layout.
var (
	_ [unsafe.Sizeof(uringSQE{}) - 64]byte
	_ [64 - unsafe.Sizeof(uringSQE{})]byte
	_ [unsafe.Sizeof(uringCQE{}) - 16]byte
	_ [16 - unsafe.Sizeof(uringCQE{})]byte
	_ [unsafe.Sizeof(uringParams{}) - 120]byte
	_ [120 - unsafe.Sizeof(uringParams{})]byte
)

// uring is one io_uring instance with its mappings. Submissions are
// serialized by sqMu and finish every io_uring_enter(2) with the SQ empty.
// Completions are reaped by whichever waiting caller holds the leader
// token: it waits in io_uring_enter(2) for completions, hands each to its
// call by user_data, and passes the token on once its own call is done
// (so one waiting caller costs no extra thread or goroutine wake-up).
type uring struct {
	fd                 int
	sqMem, cqMem, sqes []byte
	sqHead, sqTail     *uint32
	sqMask, sqEntries  uint32
	sqArray            unsafe.Pointer // [sqEntries]uint32
	cqHead, cqTail     *uint32
	cqMask             uint32
	cqes               unsafe.Pointer // [cqEntries]uringCQE
	sqFlags            *uint32        // IORING_SQ_* flags word of the SQ ring
	cqEntries          uint32

	sqMu   sync.Mutex
	closed bool          // guarded by sqMu
	slots  chan struct{} // one token per operation in flight: bounds the CQ
	pend   pendingTable
	leader chan struct{} // holding its one slot means reaping the CQ
	once   sync.Once
	cerr   error
}

// newRing sets up a ring of entries SQEs and maps it (io_uring_setup(2)).
func newRing(entries uint32) (*uring, error) { return newRingFlags(entries, 0, 0) }

// newRingFlags is newRing with io_uring_params.flags (IORING_SETUP_*) and,
// for IORING_SETUP_SQPOLL, the poll thread's idle time in ms.
func newRingFlags(entries, flags, sqIdleMs uint32) (*uring, error) {
	p := uringParams{flags: flags, sqThreadIdle: sqIdleMs}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, os.NewSyscallError("io_uring_setup", errno)
	}
	u := &uring{fd: int(fd)}
	if err := u.mapRings(&p); err != nil {
		u.unmap()
		unix.Close(u.fd)
		return nil, err
	}
	u.slots = make(chan struct{}, p.cqEntries)
	u.leader = make(chan struct{}, 1)
	return u, nil
}

// mapRings maps the SQ ring, the CQ ring (the same mapping with
// IORING_FEAT_SINGLE_MMAP) and the SQE array, and locates their fields.
func (u *uring) mapRings(p *uringParams) error {
	sqSize := int(p.sqOff.array + p.sqEntries*4)
	cqSize := int(p.cqOff.cqes + p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	single := p.features&ioringFeatSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	if u.sqMem, err = unix.Mmap(u.fd, ioringOffSQRing, sqSize, prot, flags); err != nil {
		return os.NewSyscallError("mmap io_uring SQ ring", err)
	}
	u.cqMem = u.sqMem
	if !single {
		if u.cqMem, err = unix.Mmap(u.fd, ioringOffCQRing, cqSize, prot, flags); err != nil {
			return os.NewSyscallError("mmap io_uring CQ ring", err)
		}
	}
	sqeSize := int(p.sqEntries) * int(unsafe.Sizeof(uringSQE{}))
	if u.sqes, err = unix.Mmap(u.fd, ioringOffSQEs, sqeSize, prot, flags); err != nil {
		return os.NewSyscallError("mmap io_uring SQEs", err)
	}
	u.sqHead = (*uint32)(unsafe.Pointer(&u.sqMem[p.sqOff.head]))
	u.sqTail = (*uint32)(unsafe.Pointer(&u.sqMem[p.sqOff.tail]))
	u.sqMask = *(*uint32)(unsafe.Pointer(&u.sqMem[p.sqOff.ringMask]))
	u.sqEntries = p.sqEntries
	u.sqArray = unsafe.Pointer(&u.sqMem[p.sqOff.array])
	u.cqHead = (*uint32)(unsafe.Pointer(&u.cqMem[p.cqOff.head]))
	u.cqTail = (*uint32)(unsafe.Pointer(&u.cqMem[p.cqOff.tail]))
	u.cqMask = *(*uint32)(unsafe.Pointer(&u.cqMem[p.cqOff.ringMask]))
	u.cqes = unsafe.Pointer(&u.cqMem[p.cqOff.cqes])
	u.sqFlags = (*uint32)(unsafe.Pointer(&u.sqMem[p.sqOff.flags]))
	u.cqEntries = p.cqEntries
	return nil
}

// unmap releases the mappings that exist.
func (u *uring) unmap() {
	if u.sqes != nil {
		_ = unix.Munmap(u.sqes)
	}
	if len(u.cqMem) > 0 && &u.cqMem[0] != &u.sqMem[0] {
		_ = unix.Munmap(u.cqMem)
	}
	if u.sqMem != nil {
		_ = unix.Munmap(u.sqMem)
	}
	u.sqes, u.cqMem, u.sqMem = nil, nil, nil
}

// enter calls io_uring_enter(2) without a signal mask.
func (u *uring) enter(toSubmit, minComplete, flags uint32) (int, error) {
	n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(u.fd), uintptr(toSubmit), uintptr(minComplete), uintptr(flags), 0, 0)
	if errno != 0 {
		return int(n), errno
	}
	return int(n), nil
}

// sqeAt returns the SQE in slot idx.
func (u *uring) sqeAt(idx uint32) *uringSQE {
	return (*uringSQE)(unsafe.Pointer(&u.sqes[uintptr(idx)*unsafe.Sizeof(uringSQE{})]))
}

// op is one operation to submit. iov must stay referenced until the
// operation completes (the call holds ops until then).
type op struct {
	opcode  uint8
	flags   uint8
	fd      int32
	off     uint64
	iov     []unix.Iovec
	opFlags uint32
}

// submit queues ops (at most sqEntries, in order, so links hold), enters
// them in one io_uring_enter(2), and waits until every one has completed.
// It returns the cqe.res of each, by index: the byte count or -errno.
func (u *uring) submit(ops []op) ([]int32, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if len(ops) > int(u.sqEntries) {
		return nil, fmt.Errorf("ring: %d operations exceed the %d-entry submission queue", len(ops), u.sqEntries)
	}
	c := &call{}
	u.sqMu.Lock()
	if u.closed {
		u.sqMu.Unlock()
		return nil, errUringClosed
	}
	for range ops {
		u.slots <- struct{}{}
	}
	first := u.pend.add(c, len(ops))
	start := atomic.LoadUint32(u.sqTail)
	tail := start
	for i, o := range ops {
		idx := tail & u.sqMask
		s := u.sqeAt(idx)
		*s = uringSQE{opcode: o.opcode, flags: o.flags, fd: o.fd, off: o.off, opFlags: o.opFlags, userData: first + uint64(i)}
		if len(o.iov) > 0 {
			s.addr = uint64(uintptr(unsafe.Pointer(&o.iov[0])))
			s.len = uint32(len(o.iov))
		}
		*(*uint32)(unsafe.Add(u.sqArray, uintptr(idx)*4)) = idx
		tail++
	}
	atomic.StoreUint32(u.sqTail, tail)
	err := u.flush(first, start, tail)
	u.sqMu.Unlock()
	u.wait(c)
	runtime.KeepAlive(ops)
	return c.res, err
}

// flush enters the queued SQEs until the kernel has consumed them all. On
// an error it withdraws the SQEs not consumed and completes them with the
// error, so their call still finishes. tail is the SQ tail after the last
// SQE, start the tail before the first, and first the user_data of the
// first SQE queued by this submit.
func (u *uring) flush(first uint64, start, tail uint32) error {
	for {
		head := atomic.LoadUint32(u.sqHead)
		if head == tail {
			return nil
		}
		_, err := u.enter(tail-head, 0, 0)
		if err == nil || err == unix.EINTR {
			continue
		}
		head = atomic.LoadUint32(u.sqHead)
		atomic.StoreUint32(u.sqTail, head)
		for i := head - start; i < tail-start; i++ {
			u.finish(first+uint64(i), -int32(err.(unix.Errno)))
		}
		return os.NewSyscallError("io_uring_enter", err)
	}
}

// finish records a completion and frees its in-flight slot.
func (u *uring) finish(id uint64, res int32) {
	if u.pend.complete(id, res) {
		<-u.slots
	}
}

// wait returns when c is done. Meanwhile, if no other caller is reaping,
// it takes the leader token and reaps until c is done.
func (u *uring) wait(c *call) {
	select {
	case <-c.done:
		return
	case u.leader <- struct{}{}:
	}
	defer func() { <-u.leader }()
	for {
		u.reap()
		select {
		case <-c.done:
			return
		default:
		}
		// Returns at once if a completion is already in the ring; EINTR
		// (the Go runtime's preemption signal) just loops.
		_, _ = u.enter(0, 1, ioringEnterGetEvents)
	}
}

// reap hands every completion in the CQ ring to its call. Only the holder
// of the leader token calls it.
func (u *uring) reap() {
	head := atomic.LoadUint32(u.cqHead)
	tail := atomic.LoadUint32(u.cqTail)
	for ; head != tail; head++ {
		c := (*uringCQE)(unsafe.Add(u.cqes, uintptr(head&u.cqMask)*unsafe.Sizeof(uringCQE{})))
		u.finish(c.userData, c.res)
	}
	atomic.StoreUint32(u.cqHead, head)
}

// close refuses new submissions, reaps until the operations in flight have
// completed, then unmaps the rings and closes the ring's descriptor. It is
// idempotent.
func (u *uring) close() error {
	u.once.Do(func() {
		u.sqMu.Lock()
		u.closed = true
		u.sqMu.Unlock()
		u.leader <- struct{}{} // kept: nobody reaps after this
		for {
			u.reap()
			if u.pend.size() == 0 {
				break
			}
			_, _ = u.enter(0, 1, ioringEnterGetEvents)
		}
		u.unmap()
		if err := unix.Close(u.fd); err != nil {
			u.cerr = os.NewSyscallError("close io_uring", err)
		}
	})
	return u.cerr
}

// probe checks that io_uring can be used here: not disabled by sysctl, not
// refused by seccomp (EPERM) or the kernel (ENOSYS), new enough (no-drop
// completions, IORING_REGISTER_PROBE listing NOP, WRITEV and FSYNC), and a
// NOP round trip through a real ring works.
func probe() (bool, string) {
	if b, err := os.ReadFile("/proc/sys/kernel/io_uring_disabled"); err == nil {
		if v := strings.TrimSpace(string(b)); v != "0" {
			return false, "kernel.io_uring_disabled = " + v
		}
	}
	var p uringParams
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&p)), 0)
	switch errno {
	case 0:
	case unix.ENOSYS:
		return false, "io_uring_setup: ENOSYS (kernel built without io_uring)"
	case unix.EPERM:
		return false, "io_uring_setup: EPERM (refused by seccomp or kernel.io_uring_disabled)"
	default:
		return false, "io_uring_setup: " + errno.Error()
	}
	defer unix.Close(int(fd))
	if p.features&ioringFeatNoDrop == 0 {
		return false, "kernel lacks IORING_FEAT_NODROP (older than 5.5)"
	}
	if ok, why := opsSupported(int(fd), opName{ioringOpNop, "NOP"}, opName{ioringOpWritev, "WRITEV"}, opName{ioringOpFsync, "FSYNC"}); !ok {
		return false, why
	}
	r, err := newRing(8)
	if err != nil {
		return false, err.Error()
	}
	defer r.close()
	res, err := r.submit([]op{{opcode: ioringOpNop}})
	if err != nil || res[0] != 0 {
		return false, fmt.Sprintf("NOP round trip failed: res %v, err %v", res, err)
	}
	return true, fmt.Sprintf("io_uring available (features %#x)", p.features)
}

// opName is an opcode and its name without the IORING_OP_ prefix.
type opName struct {
	code uint8
	name string
}

// opsSupported asks the ring fd whether the kernel supports every opcode
// in ops (IORING_REGISTER_PROBE, io_uring_register(2), 5.6) and, if not,
// says which one is missing.
func opsSupported(fd int, ops ...opName) (bool, string) {
	// struct io_uring_probe (16 bytes) then 256 io_uring_probe_op (8 bytes).
	var buf [16 + 256*8]byte
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(fd), ioringRegisterProbe, uintptr(unsafe.Pointer(&buf[0])), 256, 0, 0)
	if errno != 0 {
		return false, "IORING_REGISTER_PROBE: " + errno.Error() + " (kernel older than 5.6)"
	}
	lastOp := buf[0]
	for _, o := range ops {
		flags := uint16(buf[16+int(o.code)*8+2]) | uint16(buf[16+int(o.code)*8+3])<<8
		if o.code > lastOp || flags&ioUringOpSupported == 0 {
			return false, "opcode IORING_OP_" + o.name + " not supported"
		}
	}
	return true, ""
}
