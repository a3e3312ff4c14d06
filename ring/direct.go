package ring

import "unsafe"

// DirectAlign is the alignment, in bytes, that a write through a file
// opened by DirectOpener.OpenDirect must have in its buffer address, its
// file offset and its length. O_DIRECT requires the logical block size of
// the device (512 or 4096 bytes; open(2), "O_DIRECT"); 4096 satisfies
// both and is the page size, so the kernel's page-cache invalidation of
// the written range covers whole pages.
const DirectAlign = 4096

// DirectOpener is implemented by file systems that can open a file for
// direct writes (open(2) O_WRONLY|O_DIRECT): the data goes from the
// caller's buffer to the device without a copy into the page cache, and
// after each write the kernel drops the cached pages of the written range,
// so readers of the page cache (read(2), mmap(2)) read the new bytes back
// from the device. Writes must be aligned to DirectAlign (AlignedBuffer).
// The OS file system implements it on Linux; a file system or device
// that refuses O_DIRECT fails OpenDirect or the first write with EINVAL
// (tmpfs before Linux 6.6, for one), and the caller writes through the
// page cache instead. A File it returns is for writing only.
type DirectOpener interface {
	OpenDirect(name string) (File, error)
}

// AlignedBuffer returns a slice of n bytes (n rounded up to DirectAlign)
// whose first byte is aligned to DirectAlign, for direct writes. The
// memory is from the Go heap, which does not move it.
func AlignedBuffer(n int) []byte {
	n = AlignUp(n)
	b := make([]byte, n+DirectAlign)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (DirectAlign - 1)); r != 0 {
		skip = DirectAlign - r
	}
	return b[skip : skip+n : skip+n]
}

// AlignUp rounds n up to a multiple of DirectAlign.
func AlignUp[T ~int | ~int64](n T) T { return (n + DirectAlign - 1) &^ (DirectAlign - 1) }

// AlignDown rounds n down to a multiple of DirectAlign.
func AlignDown[T ~int | ~int64](n T) T { return n &^ (DirectAlign - 1) }
