package control

import (
	"context"
	"math"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/seedqueue/sq/api"
)

// A protobuf message decoded into Go takes more memory than its wire
// bytes: an empty sub-message is 2 bytes on the wire and a struct of
// about 100 bytes with a pointer in its parent's slice once decoded, and
// a packed varint is 1 byte on the wire and 4 or 8 in a slice. So a
// 16 MiB PublishRequest of empty records would take some 800 MiB. The
// server therefore estimates a request's decoded size from its wire bytes
// and its descriptor before decoding it, and charges it to the request
// budget until the handler is done with the message.
const (
	// decodedMessageBytes is the estimate of one decoded message beyond
	// its bytes fields: the generated struct, its protoimpl state and the
	// pointer to it.
	decodedMessageBytes = 160
	// decodedElementBytes is the estimate of one element of a repeated
	// field in its slice: 8 bytes, twice over for the slice's growth.
	decodedElementBytes = 24
	// decodedStringBytes is the estimate of a bytes or string field's
	// allocation beyond its bytes (size-class rounding).
	decodedStringBytes = 16
	// decodeFreeBytes is the decoded size below which a message is not
	// charged: the 8 KiB its call is charged nothing for.
	decodeFreeBytes = 64 << 10
	// decodeDepthMax bounds the nesting the estimate follows; SQ's
	// messages nest at most 4 deep.
	decodeDepthMax = 32
)

// decodedSize estimates the bytes b takes once decoded as a message of
// md: its bytes (the bytes and string fields are copied out of them) plus
// every message's and repeated element's overhead; math.MaxInt64 when it
// nests deeper than decodeDepthMax.
func decodedSize(b []byte, md protoreflect.MessageDescriptor) int64 {
	o := decodedOverhead(b, md, 0)
	if o == math.MaxInt64 {
		return o
	}
	return int64(len(b)) + o
}

// decodedOverhead is decodedSize without the bytes of b. Malformed bytes
// end the walk; Unmarshal refuses them.
func decodedOverhead(b []byte, md protoreflect.MessageDescriptor, depth int) int64 {
	if depth > decodeDepthMax {
		return math.MaxInt64
	}
	n := int64(decodedMessageBytes)
	fields := md.Fields()
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return n
		}
		b = b[l:]
		vl := protowire.ConsumeFieldValue(num, typ, b)
		if vl < 0 {
			return n
		}
		fd := fields.ByNumber(num)
		switch {
		case fd == nil:
			// Kept as unknown bytes, counted with b.
		case typ == protowire.BytesType && (fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind):
			v, _ := protowire.ConsumeBytes(b)
			sub := decodedOverhead(v, fd.Message(), depth+1)
			if sub == math.MaxInt64 {
				return sub
			}
			n += sub + decodedElementBytes
		case typ == protowire.BytesType && fd.IsList() && fd.Kind() != protoreflect.BytesKind && fd.Kind() != protoreflect.StringKind:
			// Packed scalars: at most one element per byte.
			n += int64(vl) * decodedElementBytes
		case fd.IsList():
			n += decodedElementBytes
			if typ == protowire.BytesType {
				n += decodedStringBytes
			}
		case typ == protowire.BytesType:
			n += decodedStringBytes
		}
		b = b[vl:]
	}
	return n
}

// budgetCodec is the server's protobuf codec: before a request is
// decoded, its decoded size is estimated and charged to the request
// budget (without waiting: THROTTLED when it does not fit,
// MESSAGE_TOO_LARGE when it could never fit); the charge is given back by
// releaseDecoded once the handler is done with the message. A request that
// does not decode (a string field that is not UTF-8, say) is refused with
// INVALID_REQUEST by the same interceptors.
type budgetCodec struct {
	s    *Server
	base encoding.CodecV2
}

// Name implements encoding.CodecV2: it replaces the proto codec.
func (budgetCodec) Name() string { return "proto" }

// Marshal implements encoding.CodecV2.
func (c budgetCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

// Unmarshal implements encoding.CodecV2.
func (c budgetCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	est := decodedSize(b, m.ProtoReflect().Descriptor())
	if est > decodeFreeBytes {
		budget := c.s.recv
		var refusal error
		switch {
		case est > budget.max-budget.charge:
			refusal = api.NewError(api.CodeMessageTooLarge,
				"control: request of %d bytes would take about %d bytes decoded (it holds very many small fields), above what the gRPC request budget (%d bytes) can hold; send fewer records or entries per request",
				len(b), est, budget.max)
		case !budget.tryAcquire(est):
			c.s.metrics.grpcThrottled.Inc()
			refusal = api.NewError(api.CodeThrottled,
				"control: no room for a request of about %d bytes decoded in the gRPC request budget (%d bytes); retry", est, budget.max)
		}
		if refusal != nil {
			// Not decoded: the interceptor answers with the refusal (grpc
			// would turn a codec error into INTERNAL).
			c.s.decoded.Store(v, refusal)
			return nil
		}
		c.s.decoded.Store(v, est)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		// Bytes that do not decode (a string field that is not UTF-8,
		// broken wire format) are the client's fault: INVALID_REQUEST
		// through the interceptor, not the INTERNAL grpc makes of a codec
		// error.
		_ = c.s.releaseDecoded(v)
		c.s.decoded.Store(v, api.NewError(api.CodeInvalidRequest, "control: request is not a valid %s: %v",
			m.ProtoReflect().Descriptor().FullName(), err))
		return nil
	}
	return nil
}

// decodedCharges maps a decoded request (its pointer) to its charge
// (int64 bytes), or a request the codec refused to decode to the refusal
// (error).
type decodedCharges = sync.Map

// releaseDecoded gives back the charge of request v, if any, and returns
// the refusal of v, if it was refused.
func (s *Server) releaseDecoded(v any) error {
	got, ok := s.decoded.LoadAndDelete(v)
	if !ok {
		return nil
	}
	if err, refused := got.(error); refused {
		return err
	}
	s.recv.give(got.(int64), 0)
	return nil
}

// decodeUnary answers a request the codec refused with its refusal, and
// gives back a request's charge once its handler returned.
func (s *Server) decodeUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := s.refusal(req); err != nil {
		return nil, ToStatus(err)
	}
	defer func() { _ = s.releaseDecoded(req) }()
	return h(ctx, req)
}

// refusal returns the codec's refusal of req, if any, and forgets it.
func (s *Server) refusal(req any) error {
	if got, ok := s.decoded.Load(req); ok {
		if err, refused := got.(error); refused {
			s.decoded.Delete(req)
			return err
		}
	}
	return nil
}

// decodeStream gives back the charge of a streamed request at the next
// RecvMsg (the handler is done with it) and when the stream ends.
func (s *Server) decodeStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	rs := &releasingStream{ServerStream: ss, s: s}
	defer rs.release()
	return h(srv, rs)
}

type releasingStream struct {
	grpc.ServerStream
	s    *Server
	prev any
}

func (r *releasingStream) release() {
	if r.prev != nil {
		_ = r.s.releaseDecoded(r.prev)
		r.prev = nil
	}
}

// RecvMsg implements grpc.ServerStream: a message the codec refused
// ends the stream with the refusal.
func (r *releasingStream) RecvMsg(m any) error {
	r.release()
	if err := r.ServerStream.RecvMsg(m); err != nil {
		_ = r.s.releaseDecoded(m)
		return err
	}
	if err := r.s.refusal(m); err != nil {
		return ToStatus(err)
	}
	r.prev = m
	return nil
}
