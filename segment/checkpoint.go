package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"

	"github.com/seedqueue/sq/ring"
)

// Recovery point file, 36 bytes, little-endian:
//
//	 0  4  magic "SQRP"
//	 4  u32 version 1
//	 8  u64 nextOffset     offset after the last durable batch
//	16  u64 segmentBase    base offset of the segment holding position
//	24  u64 position       byte position in that segment's .log after the last durable batch
//	32  u32 crc            CRC-32C (Castagnoli) of bytes [0, 32)
const (
	rpSize    = 36
	rpMagic   = "SQRP"
	rpVersion = 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recoveryPoint is a position in the log known to be durable.
type recoveryPoint struct {
	next uint64 // offset after the last durable batch
	base uint64 // base offset of the segment holding pos
	pos  int64  // byte position after the last durable batch
}

func (rp recoveryPoint) encode() []byte {
	b := make([]byte, rpSize)
	copy(b, rpMagic)
	binary.LittleEndian.PutUint32(b[4:], rpVersion)
	binary.LittleEndian.PutUint64(b[8:], rp.next)
	binary.LittleEndian.PutUint64(b[16:], rp.base)
	binary.LittleEndian.PutUint64(b[24:], uint64(rp.pos))
	binary.LittleEndian.PutUint32(b[32:], crc32.Checksum(b[:32], castagnoli))
	return b
}

func decodeRecoveryPoint(b []byte) (recoveryPoint, error) {
	switch {
	case len(b) != rpSize:
		return recoveryPoint{}, fmt.Errorf("%d bytes, want %d", len(b), rpSize)
	case string(b[:4]) != rpMagic:
		return recoveryPoint{}, fmt.Errorf("bad magic %q", b[:4])
	case binary.LittleEndian.Uint32(b[4:]) != rpVersion:
		return recoveryPoint{}, fmt.Errorf("version %d, want %d", binary.LittleEndian.Uint32(b[4:]), rpVersion)
	case binary.LittleEndian.Uint32(b[32:]) != crc32.Checksum(b[:32], castagnoli):
		return recoveryPoint{}, errors.New("checksum mismatch")
	}
	rp := recoveryPoint{
		next: binary.LittleEndian.Uint64(b[8:]),
		base: binary.LittleEndian.Uint64(b[16:]),
		pos:  int64(binary.LittleEndian.Uint64(b[24:])),
	}
	if rp.pos < 0 || rp.pos > 1<<32 || rp.next < rp.base {
		return recoveryPoint{}, fmt.Errorf("impossible values %+v", rp)
	}
	return rp, nil
}

// readRecoveryPoint reads dir's recovery point. found is false when the
// file does not exist, and also when it cannot be read or does not decode
// (empty, short, checksum mismatch): the file is written atomically (tmp,
// fsync, rename), so damage means disk trouble, which is logged at ERROR
// level naming the file; recovery then scans as if there were none, which
// is safe because sealed segments must be whole (doc.go) and only the last
// segment's tail can be cut.
func readRecoveryPoint(fsys ring.FS, dir string, logger *slog.Logger) (rp recoveryPoint, found bool, err error) {
	path := filepath.Join(dir, recoveryPointName)
	f, err := fsys.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return recoveryPoint{}, false, nil
	}
	if err != nil {
		return recoveryPoint{}, false, fmt.Errorf("segment: open: %w", err)
	}
	defer f.Close()
	b := make([]byte, rpSize+1)
	n, err := f.ReadAt(b, 0)
	if err == nil || err == io.EOF {
		rp, err = decodeRecoveryPoint(b[:n])
	}
	if err != nil {
		logger.Error("segment: recovery-point file damaged (disk trouble?); ignoring it and scanning the whole log",
			"file", path, "err", err)
		return recoveryPoint{}, false, nil
	}
	return rp, true, nil
}

// writeRecoveryPoint replaces dir's recovery point durably (writeFileAtomic).
func writeRecoveryPoint(fsys ring.FS, dir string, rp recoveryPoint) error {
	if err := writeFileAtomic(fsys, dir, filepath.Join(dir, recoveryPointName), rp.encode()); err != nil {
		return fmt.Errorf("segment: checkpoint: %w", err)
	}
	return nil
}

// writeFileAtomic replaces the file at path in directory dir with data,
// never in place: it writes path.sqtmp, fsyncs it, renames it over path
// and fsyncs dir. A crash leaves the old file or the new one whole (and
// perhaps a .sqtmp file, which Open deletes).
func writeFileAtomic(fsys ring.FS, dir, path string, data []byte) error {
	tmp := path + tmpSuffix
	f, err := fsys.Create(tmp)
	if err != nil {
		return err
	}
	if len(data) > 0 {
		_, err = f.WriteAt(data, 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fsys.Rename(tmp, path)
	}
	if err == nil {
		err = fsys.SyncDir(dir)
	}
	if err != nil {
		_ = fsys.Remove(tmp) // best effort; Open deletes .sqtmp files
	}
	return err
}
