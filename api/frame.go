package api

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"net"

	"capnproto.org/go/capnp/v3"
)

// Data-plane protocol versions, negotiated in the handshake
// (docs/architecture.md §4): the client states the lowest version it speaks
// in HandshakeRequest.protocolVersion and the highest in
// maxProtocolVersion; the server answers the highest version both speak,
// or UNSUPPORTED_VERSION when protocolVersion is outside
// [MinProtocolVersion, ProtocolVersion].
const (
	// ProtocolVersion is the highest version this build speaks.
	ProtocolVersion uint16 = 2
	// MinProtocolVersion is the lowest version this build speaks: version
	// 1, served by every release.
	MinProtocolVersion uint16 = 1
	// PublishBatchesVersion is the first version that serves
	// publishBatchesRequest; a connection on an earlier one publishes with
	// one PublishRequest per batch.
	PublishBatchesVersion uint16 = 2
)

// MaxPublishEntries bounds the entries of one PublishBatchesRequest; a
// request with more is refused whole with INVALID_REQUEST. 1,024 entries
// keep the request's Cap'n Proto part near 64 KiB and its response, whose
// entries may each carry an error text, under the default 1 MiB
// maxFrameBytes.
const MaxPublishEntries = 1024

// Default limits of the data plane (docs/architecture.md §4), stated by the server in its
// handshake response.
const (
	DefaultMaxRecordBytes = 1 << 20  // 1 MiB: key + value + headers of one record
	DefaultMaxBatchBytes  = 16 << 20 // 16 MiB: one batch, and the records tail of one frame
	DefaultMaxFrameBytes  = 1 << 20  // 1 MiB: the Cap'n Proto part of one frame
)

// ErrFrameTooLarge reports a frame or tail whose declared length is over the
// reader's limit. The stream cannot be resynchronised after it: close the
// connection.
var ErrFrameTooLarge = errors.New("api: frame over the size limit")

// FrameReader reads data-plane frames, each a Cap'n Proto message followed by
// its raw records tail, from a byte stream. It never allocates more than
// maxFrameBytes for a frame or maxTailBytes for a tail, whatever the length
// prefixes on the stream say. A FrameReader is not safe for concurrent use.
type FrameReader struct {
	r            *bufio.Reader
	dec          *capnp.Decoder
	maxTailBytes uint32
}

// NewFrameReader returns a FrameReader on r with a 64 KiB read buffer.
// maxFrameBytes bounds the Cap'n Proto part (including its segment table),
// maxTailBytes the records tail.
func NewFrameReader(r io.Reader, maxFrameBytes, maxTailBytes uint32) *FrameReader {
	br := bufio.NewReaderSize(r, 64<<10)
	dec := capnp.NewDecoder(br)
	dec.MaxMessageSize = uint64(maxFrameBytes)
	return &FrameReader{r: br, dec: dec, maxTailBytes: maxTailBytes}
}

// ReadFrame reads the next frame's Cap'n Proto part. The caller must then
// read its tail with ReadTail (TailLength says how long) before the next
// ReadFrame. io.EOF means the stream ended cleanly between frames; a stream
// that ends inside a frame returns io.ErrUnexpectedEOF.
func (fr *FrameReader) ReadFrame() (*capnp.Message, Frame, error) {
	msg, err := fr.dec.Decode()
	if err != nil {
		if errors.Is(err, io.EOF) {
			// capnp returns io.EOF only when no byte of the frame was read.
			return nil, Frame{}, err
		}
		return nil, Frame{}, fmt.Errorf("api: read frame: %w", err)
	}
	// A frame is small; bound traversal so a crafted message with pointer
	// loops cannot spin: 8x the frame size in words is ample for any
	// well-formed frame.
	msg.ResetReadLimit(uint64(fr.dec.MaxMessageSize) * 8)
	f, err := ReadRootFrame(msg)
	if err != nil {
		msg.Release()
		return nil, Frame{}, fmt.Errorf("api: frame root: %w", err)
	}
	return msg, f, nil
}

// ReadTail reads the n-byte records tail that follows the frame just read,
// into dst when it has room (dst[:n] is returned) or into a new slice.
// n over the reader's tail limit returns ErrFrameTooLarge without reading.
func (fr *FrameReader) ReadTail(n uint32, dst []byte) ([]byte, error) {
	if n == 0 {
		return dst[:0], nil
	}
	if n > fr.maxTailBytes {
		return nil, fmt.Errorf("%w: records tail of %d bytes, limit %d", ErrFrameTooLarge, n, fr.maxTailBytes)
	}
	if cap(dst) < int(n) {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if _, err := io.ReadFull(fr.r, dst); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("api: read records tail: %w", err)
	}
	return dst, nil
}

// TailLength returns the length of the records tail that follows f on the
// stream: recordsLength of a publish request, fetch response, replica fetch
// response or push, the sum of its entries' recordsLength for a
// publishBatches request (math.MaxUint32 when the sum passes it, over
// every reader's limit), 0 otherwise.
func TailLength(f Frame) uint32 {
	switch f.Which() {
	case Frame_Which_publishRequest:
		if r, err := f.PublishRequest(); err == nil {
			return r.RecordsLength()
		}
	case Frame_Which_publishBatchesRequest:
		if r, err := f.PublishBatchesRequest(); err == nil {
			if l, err := r.Entries(); err == nil {
				return PublishBatchesTail(l)
			}
		}
	case Frame_Which_fetchResponse:
		if r, err := f.FetchResponse(); err == nil {
			return r.RecordsLength()
		}
	case Frame_Which_pushBatches:
		if r, err := f.PushBatches(); err == nil {
			return r.RecordsLength()
		}
	case Frame_Which_replicaFetchResponse:
		if r, err := f.ReplicaFetchResponse(); err == nil {
			return r.RecordsLength()
		}
	}
	return 0
}

// PublishBatchesTail returns the records tail of a PublishBatchesRequest
// with entries l: the sum of their recordsLength, saturated at
// math.MaxUint32.
func PublishBatchesTail(l PublishBatchesEntry_List) uint32 {
	var n uint64
	for i := 0; i < l.Len(); i++ {
		n += uint64(l.At(i).RecordsLength())
		if n >= math.MaxUint32 {
			return math.MaxUint32
		}
	}
	return uint32(n)
}

// NewFrameMessage returns a new single-segment message whose root is an empty Frame
// with the given correlation id.
func NewFrameMessage(correlationID uint64) (*capnp.Message, Frame, error) {
	msg, seg, err := capnp.NewMessage(capnp.SingleSegment(nil))
	if err != nil {
		return nil, Frame{}, err
	}
	f, err := NewRootFrame(seg)
	if err != nil {
		return nil, Frame{}, err
	}
	f.SetCorrelationId(correlationID)
	return msg, f, nil
}

// WriteFrame writes msg in stream framing followed by the tail buffers, with
// one writev when w is a *net.TCPConn or other writer that net.Buffers
// recognises. The tail buffers are not copied.
func WriteFrame(w io.Writer, msg *capnp.Message, tail ...[]byte) error {
	b, err := msg.Marshal()
	if err != nil {
		return fmt.Errorf("api: marshal frame: %w", err)
	}
	if len(tail) == 0 {
		_, err = w.Write(b)
		return err
	}
	bufs := make(net.Buffers, 0, 1+len(tail))
	bufs = append(bufs, b)
	bufs = append(bufs, tail...)
	_, err = bufs.WriteTo(w)
	return err
}
