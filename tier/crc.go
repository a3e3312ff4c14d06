package tier

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
)

// castagnoli is the CRC-32C table (polynomial 0x1EDC6F41, RFC 3720
// §B.4), the checksum of SQ's batches and of every object it uploads.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcBufBytes is the size of the buffer ChecksumReaderAt reads through.
const crcBufBytes = 1 << 20

// ChecksumReaderAt returns the CRC-32C of the size bytes of r from position
// 0, reading 1 MiB at a time. It fails if r holds fewer than size bytes.
func ChecksumReaderAt(r io.ReaderAt, size int64) (uint32, error) {
	return checksumReader(io.NewSectionReader(r, 0, size), size)
}

// checksumReader returns the CRC-32C of the next size bytes of r, failing
// with io.ErrUnexpectedEOF if r ends first.
func checksumReader(r io.Reader, size int64) (uint32, error) {
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(h, io.LimitReader(r, size), make([]byte, min(size, crcBufBytes)+1))
	if err != nil {
		return 0, err
	}
	if n != size {
		return 0, io.ErrUnexpectedEOF
	}
	return h.Sum32(), nil
}

// Checksum returns the CRC-32C (Castagnoli) of b.
func Checksum(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Verify reads the whole object under key from s and checks that it holds
// exactly size bytes whose CRC-32C is crc, as a manifest records them.
// Errors: ErrCorrupt (wrapped in a message giving the key and both
// values) when the size or checksum differ, ErrNotFound when the object is
// missing, else the store's error.
func Verify(ctx context.Context, s ObjectStore, key string, size int64, crc uint32) error {
	rc, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return fmt.Errorf("tier: verify %s: %w", key, err)
	}
	defer rc.Close()
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(h, rc, make([]byte, min(max(size, 0), crcBufBytes)+1))
	if err != nil {
		return fmt.Errorf("tier: verify %s: reading after %d bytes: %w", key, n, err)
	}
	if n != size {
		return fmt.Errorf("tier: verify %s: %w: %d bytes stored, %d expected", key, ErrCorrupt, n, size)
	}
	if got := h.Sum32(); got != crc {
		return fmt.Errorf("tier: verify %s: %w: CRC-32C %08x stored, %08x expected", key, ErrCorrupt, got, crc)
	}
	return nil
}
