package tier

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// MemStore is an ObjectStore in memory, for tests of the code above the
// seam: it keeps every object's bytes, the CRC-32C computed at Put and a
// modification time from Now. Its zero value is empty and ready to use;
// it is safe for concurrent use. Check always succeeds.
type MemStore struct {
	// Now dates objects; nil means time.Now.
	Now func() time.Time

	mu      sync.Mutex
	objects map[string]memObject
}

// memObject is one stored object.
type memObject struct {
	data     []byte
	crc      uint32
	modified time.Time
}

var _ ObjectStore = (*MemStore)(nil)

// Put stores a copy of body's size bytes under key (see ObjectStore.Put).
func (s *MemStore) Put(ctx context.Context, key string, body io.ReaderAt, size int64, opts PutOptions) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, fmt.Errorf("tier: put %s: %w", key, err)
	}
	if size < 0 {
		return ObjectInfo{}, fmt.Errorf("tier: put %s: negative size %d", key, size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(body, 0, size), data); err != nil {
		return ObjectInfo{}, fmt.Errorf("tier: put %s: reading the body: %w", key, err)
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	o := memObject{data: data, crc: Checksum(data), modified: now()}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.objects[key]; ok && opts.IfAbsent {
		return ObjectInfo{}, fmt.Errorf("tier: put %s: %w", key, ErrExists)
	}
	if s.objects == nil {
		s.objects = make(map[string]memObject)
	}
	s.objects[key] = o
	return o.info(key), nil
}

// Get returns a reader of a copy of the range (see ObjectStore.Get).
func (s *MemStore) Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tier: get %s: %w", key, err)
	}
	s.mu.Lock()
	o, ok := s.objects[key]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("tier: get %s: %w", key, ErrNotFound)
	}
	size := int64(len(o.data))
	if off < 0 || off > 0 && off >= size {
		return nil, fmt.Errorf("tier: get %s: %w: offset %d of %d bytes", key, ErrInvalidRange, off, size)
	}
	end := size
	if n >= 0 && off+n < size {
		end = off + n
	}
	return io.NopCloser(bytes.NewReader(bytes.Clone(o.data[off:end]))), nil
}

// Head returns the object's size, CRC-32C and time (see ObjectStore.Head).
func (s *MemStore) Head(ctx context.Context, key string) (ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return ObjectInfo{}, fmt.Errorf("tier: head %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if !ok {
		return ObjectInfo{}, fmt.Errorf("tier: head %s: %w", key, ErrNotFound)
	}
	return o.info(key), nil
}

// List returns the objects under prefix in key order, without CRC-32C.
func (s *MemStore) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("tier: list %s: %w", prefix, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ObjectInfo
	for k, o := range s.objects {
		if strings.HasPrefix(k, prefix) {
			info := o.info(k)
			info.CRC32C, info.HasCRC32C = 0, false
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete removes key; a missing key is not an error.
func (s *MemStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tier: delete %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	return nil
}

// Check succeeds unless ctx is done.
func (s *MemStore) Check(ctx context.Context) error { return ctx.Err() }

// Damage replaces the bytes of the object under key with data, keeping the
// CRC-32C recorded at Put, as damage at rest would; it reports whether
// the object existed. For tests of corruption handling.
func (s *MemStore) Damage(key string, data []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[key]
	if ok {
		o.data = bytes.Clone(data)
		s.objects[key] = o
	}
	return ok
}

// info describes o stored under key.
func (o memObject) info(key string) ObjectInfo {
	return ObjectInfo{Key: key, Size: int64(len(o.data)), CRC32C: o.crc, HasCRC32C: true, LastModified: o.modified}
}
