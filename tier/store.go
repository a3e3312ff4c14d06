package tier

import (
	"context"
	"errors"
	"io"
	"time"
)

// Errors of the package. Implementations of ObjectStore wrap them with %w,
// so callers test them with errors.Is.
var (
	// ErrNotFound means the object (or, from Check, the bucket) does not
	// exist. Only Get, Head and Check return it; Delete of a missing
	// object succeeds.
	ErrNotFound = errors.New("tier: not found")

	// ErrExists means a Put with PutOptions.IfAbsent found an object
	// already under the key (S3: 412 Precondition Failed on If-None-Match),
	// so nothing was written.
	ErrExists = errors.New("tier: object already exists")

	// ErrCorrupt is the class of integrity failures: an object whose size
	// or CRC-32C is not what was uploaded or what a manifest records, and
	// a manifest that fails its own checksum or its checks. Such data is
	// reported, never trusted.
	ErrCorrupt = errors.New("tier: corrupt")

	// ErrInvalidRange means a Get started at or beyond the end of the
	// object (S3: 416 InvalidRange).
	ErrInvalidRange = errors.New("tier: range not satisfiable")

	// ErrBucket means the store's bucket cannot be used: it does not
	// exist, access is denied, or the endpoint cannot be reached. Check
	// returns it, with the cause in the message (and, for a missing
	// bucket, ErrNotFound as well).
	ErrBucket = errors.New("tier: bucket unavailable")
)

// ObjectStore is the seam between SQ and an object store: a flat
// namespace of immutable objects named by keys ("/"-separated, see
// SegmentKeys and ManifestKey), each written whole by Put and read by byte
// ranges. Implementations are safe for concurrent use. Every method honours
// ctx: a cancelled context stops the call and returns an error wrapping
// ctx.Err().
//
// The S3 implementation is in package tier/s3; MemStore is an in-memory
// one for tests.
type ObjectStore interface {
	// Put stores the size bytes of body, read from position 0, under key,
	// replacing any object there unless opts.IfAbsent is set. It computes
	// the CRC-32C (Castagnoli) of the bytes it sends and, before it returns
	// success, verifies the stored object's size and CRC-32C (how depends
	// on the implementation: tier/s3 reads the object back unless told
	// otherwise). The returned ObjectInfo holds the key, size and CRC-32C.
	// Errors: ErrExists (IfAbsent and the key is taken), ErrCorrupt (the
	// stored object is not what was sent; the caller may retry the Put), or
	// the store's error. body must not change during the call: it may be
	// read more than once (retries, verification).
	Put(ctx context.Context, key string, body io.ReaderAt, size int64, opts PutOptions) (ObjectInfo, error)

	// Get returns a reader of the object's bytes [off, off+n), or
	// [off, end) when n < 0; a range running past the end of the object
	// is cut at the end. The caller closes the reader. A reader whose
	// connection breaks before the range is read returns an error (never a
	// silent short read). Get(ctx, key, 0, -1) reads the whole object,
	// even an empty one. n == 0 reads nothing. Errors: ErrNotFound,
	// ErrInvalidRange (off < 0, or off > 0 at or beyond the end).
	Get(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)

	// Head returns the object's size, CRC-32C (if it was written by Put)
	// and modification time, without its bytes. Errors: ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)

	// List returns every object whose key starts with prefix, in ascending
	// byte order of keys. The CRC32C of the returned entries is not set
	// (object stores do not list user metadata): use Head for it.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)

	// Delete removes the object under key. Deleting an object that does
	// not exist succeeds, as S3's DeleteObject does.
	Delete(ctx context.Context, key string) error

	// Check reports whether the store's bucket exists and is reachable
	// with the configured credentials. Errors wrap ErrBucket, with the
	// cause (missing bucket, access denied, network) in the message.
	Check(ctx context.Context) error
}

// PutOptions modify a Put. The zero value is an unconditional Put.
type PutOptions struct {
	// IfAbsent makes the Put fail with ErrExists instead of replacing an
	// existing object (S3 conditional write, If-None-Match: *). Manifests
	// are written this way so a version is never overwritten, even by two
	// leaders racing. A retried attempt can meet the object its own
	// earlier attempt wrote (the answer was lost) and report ErrExists:
	// the caller compares the stored bytes (PutManifest does).
	IfAbsent bool
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	// Key is the object's full key.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// CRC32C is the CRC-32C (Castagnoli) of the object's bytes, as
	// recorded by Put; valid only when HasCRC32C is set.
	CRC32C uint32
	// HasCRC32C says whether CRC32C is known: true after Put and from Head
	// of an object written by Put, false from List.
	HasCRC32C bool
	// LastModified is the store's modification time of the object (zero
	// if the store did not say).
	LastModified time.Time
}
