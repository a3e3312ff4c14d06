package control_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/sdk"
)

// invalidUTF8 are byte strings that are not UTF-8: a lone continuation
// byte, a truncated sequence, an overlong encoding, a surrogate, a byte
// above F4, and valid text with one bad byte inside.
var invalidUTF8 = []string{"\x80", "caf\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf8\x88\x80\x80\x80", "ok-\xff-ok"}

// validNonASCII are valid UTF-8 strings beyond ASCII.
var validNonASCII = []string{"grüppe", "日本語", "emoji-😀", "nul\x00inside"}

// TestStringsCrossBothPlanes: group ids, client ids and commit metadata
// are strings on both planes; bytes that are not UTF-8 are refused over
// Cap'n Proto with INVALID_REQUEST (gRPC cannot carry them at all), they
// leave nothing that breaks a gRPC read, and valid non-ASCII text crosses
// both ways unchanged.
func TestStringsCrossBothPlanes(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateTopic(ctx, "s", 1, sdk.TopicConfig{}); err != nil {
		t.Fatal(err)
	}
	msg := sqv1.NewMessagingClient(n.conn)
	if err := publishN(ctx, msg, "s", 3); err != nil {
		t.Fatal(err)
	}
	groups := sqv1.NewGroupsClient(n.conn)

	for _, bad := range invalidUTF8 {
		if _, err := c.CommitOffsets(ctx, bad, []sdk.OffsetCommit{{Topic: "s", Offset: 1}}); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("Cap'n Proto commit for group %q: %v, want INVALID_REQUEST", bad, err)
		}
		if _, err := c.JoinGroup(ctx, bad, "", []string{"s"}, 0); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("Cap'n Proto join of group %q: %v, want INVALID_REQUEST", bad, err)
		}
		if _, err := c.FetchOffsets(ctx, bad, "s"); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("Cap'n Proto fetch offsets of group %q: %v, want INVALID_REQUEST", bad, err)
		}
		res, err := c.CommitOffsets(ctx, "meta", []sdk.OffsetCommit{{Topic: "s", Offset: 1, Metadata: bad}})
		if err != nil || len(res) != 1 || !errors.Is(res[0].Err, api.ErrInvalidRequest) {
			t.Errorf("Cap'n Proto commit with metadata %q: %+v, %v; want the entry refused with INVALID_REQUEST", bad, res, err)
		}
		if _, err := c.CreateTopic(ctx, "t-"+bad, 1, sdk.TopicConfig{}); !errors.Is(err, api.ErrInvalidTopicName) {
			t.Errorf("Cap'n Proto create of topic %q: %v, want INVALID_TOPIC_NAME", "t-"+bad, err)
		}
		// The SDK refuses such a client id before it dials; the engine's
		// own refusal, for other clients, is engine.TestJoinRefusesTextThatIsNotUTF8.
		if _, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr, ClientID: bad}); !errors.Is(err, sdk.ErrInvalidConfig) {
			t.Errorf("Dial with client id %q: %v, want ErrInvalidConfig", bad, err)
		}
	}
	// Nothing refused is visible, and every gRPC read still answers.
	lg, err := groups.ListGroups(ctx, &sqv1.ListGroupsRequest{})
	if err != nil || len(lg.Groups) != 0 {
		t.Fatalf("gRPC ListGroups after refused names = %v, %v; want none", lg, err)
	}

	// Valid non-ASCII text, written on one plane, read on the other.
	for _, s := range validNonASCII {
		// Cap'n Proto -> gRPC: group id, metadata and client id.
		res, err := c.CommitOffsets(ctx, "c-"+s, []sdk.OffsetCommit{{Topic: "s", Offset: 1, Metadata: "m-" + s}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("Cap'n Proto commit %q: %+v, %v", s, res, err)
		}
		fo, err := msg.FetchOffsets(ctx, &sqv1.FetchOffsetsRequest{Group: "c-" + s})
		if err != nil || len(fo.Offsets) != 1 || fo.Offsets[0].Metadata != "m-"+s || fo.Offsets[0].Offset != 1 {
			t.Errorf("gRPC FetchOffsets of %q = %v, %v", "c-"+s, fo, err)
		}
		mc, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr, ClientID: "client-" + s})
		if err != nil {
			t.Fatal(err)
		}
		m, err := mc.JoinGroup(ctx, "j-"+s, "", []string{"s"}, 0)
		if err != nil {
			mc.Close()
			t.Fatalf("Cap'n Proto join with client id %q: %v", "client-"+s, err)
		}
		d, err := groups.DescribeGroup(ctx, &sqv1.DescribeGroupRequest{Group: "j-" + s})
		if err != nil || len(d.Members) != 1 || d.Members[0].ClientId != "client-"+s || d.Group != "j-"+s {
			t.Errorf("gRPC DescribeGroup of %q = %v, %v", "j-"+s, d, err)
		}
		if err := mc.LeaveGroup(ctx, "j-"+s, m.MemberID); err != nil {
			t.Error(err)
		}
		mc.Close()

		// gRPC -> Cap'n Proto: group id and metadata.
		cr, err := msg.CommitOffsets(ctx, &sqv1.CommitOffsetsRequest{Group: "g-" + s, Offsets: []*sqv1.OffsetEntry{{Topic: "s", Offset: 2, Metadata: "m-" + s}}})
		if err != nil || cr.Offsets[0].Error != "" {
			t.Fatalf("gRPC commit %q: %v, %v", s, cr, err)
		}
		got, err := c.FetchOffsets(ctx, "g-"+s, "s")
		if err != nil || len(got) != 1 || got[0].Metadata != "m-"+s || got[0].Offset != 2 {
			t.Errorf("Cap'n Proto FetchOffsets of %q = %+v, %v", "g-"+s, got, err)
		}
	}
	// The joined groups are gone with their last member (no offsets).
	lg, err = groups.ListGroups(ctx, &sqv1.ListGroupsRequest{})
	if err != nil || len(lg.Groups) != 2*len(validNonASCII) {
		t.Fatalf("gRPC ListGroups = %v, %v; want %d groups", lg, err, 2*len(validNonASCII))
	}
	cl, err := c.ListGroups(ctx)
	if err != nil || len(cl) != 2*len(validNonASCII) {
		t.Fatalf("Cap'n Proto ListGroups = %+v, %v", cl, err)
	}
}

// TestHeaderKeysAcrossSDKPlanes: header keys that are not UTF-8 published
// by the SDK on one plane are read unchanged by the SDK on the other.
func TestHeaderKeysAcrossSDKPlanes(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var hs []sdk.Header
	for _, k := range append(append([]string{}, invalidUTF8...), validNonASCII...) {
		hs = append(hs, sdk.Header{Key: k, Value: []byte("v-" + k)})
	}
	cp, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	gp, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	for _, topic := range []string{"c2g", "g2c"} {
		if _, err := cp.Client().CreateTopic(ctx, topic, 1, sdk.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.SendBatch(ctx, []sdk.ProducerMessage{{Topic: "c2g", Value: []byte("x"), Headers: hs}}); err != nil {
		t.Fatal(err)
	}
	if _, err := gp.SendBatch(ctx, []sdk.ProducerMessage{{Topic: "g2c", Value: []byte("x"), Headers: hs}}); err != nil {
		t.Fatal(err)
	}
	gc, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr}, Topic: "c2g"})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	cc, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: n.capnpAddr, Topic: "g2c"})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	for name, poll := range map[string]func(context.Context) ([]sdk.Message, error){
		"Cap'n Proto -> GrpcConsumer": gc.Poll, "GrpcProducer -> Cap'n Proto": cc.Poll,
	} {
		var msgs []sdk.Message
		for len(msgs) == 0 && ctx.Err() == nil {
			if msgs, err = poll(ctx); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if len(msgs) != 1 || !sameHeaders(msgs[0].Headers, hs) {
			t.Errorf("%s: read %+v, want headers %q", name, msgs, hs)
		}
	}
}

// rawCodec sends and receives already encoded protobuf bytes, as a client
// in a language whose protobuf library does not check UTF-8 may.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestGrpcRefusesInvalidUTF8Strings: string fields with bytes that are not
// UTF-8, sent over gRPC by a client that does not check them, are refused
// (the gRPC layer cannot decode them) and leave nothing a Cap'n Proto read
// would see. (Header keys, a bytes field, cross: see interopRecords.)
func TestGrpcRefusesInvalidUTF8Strings(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "r", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if err := publishN(ctx, sqv1.NewMessagingClient(n.conn), "r", 2); err != nil {
		t.Fatal(err)
	}
	c, err := sdk.Dial(ctx, sdk.ClientConfig{Addr: n.capnpAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	call := func(method string, req []byte) error {
		var resp []byte
		return n.conn.Invoke(ctx, "/sq.v1.Messaging/"+method, &req, &resp, grpc.ForceCodec(rawCodec{}))
	}
	entry := func(metadata string) []byte {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, "r")
		e = protowire.AppendTag(e, 3, protowire.VarintType)
		e = protowire.AppendVarint(e, 1)
		e = protowire.AppendTag(e, 4, protowire.BytesType)
		return protowire.AppendString(e, metadata)
	}
	commit := func(group, metadata string) []byte {
		var b []byte
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, group)
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		return protowire.AppendBytes(b, entry(metadata))
	}
	if err := call("CommitOffsets", commit("ok", "fine")); err != nil {
		t.Fatalf("the raw codec itself: %v", err)
	}
	refused := func(what string, err error) {
		t.Helper()
		if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || errorReason(st) != "INVALID_REQUEST" {
			t.Errorf("%s: %v, want InvalidArgument INVALID_REQUEST", what, err)
		}
	}
	// strs encodes string fields 1, 2, ... in order.
	strs := func(vs ...string) []byte {
		var b []byte
		for i, v := range vs {
			b = protowire.AppendTag(b, protowire.Number(i+1), protowire.BytesType)
			b = protowire.AppendString(b, v)
		}
		return b
	}
	groups := func(method string, req []byte) error {
		var resp []byte
		return n.conn.Invoke(ctx, "/sq.v1.Groups/"+method, &req, &resp, grpc.ForceCodec(rawCodec{}))
	}
	for _, bad := range invalidUTF8 {
		refused(fmt.Sprintf("gRPC commit for group %q", "g-"+bad), call("CommitOffsets", commit("g-"+bad, "m")))
		refused(fmt.Sprintf("gRPC commit with metadata %q", bad), call("CommitOffsets", commit("ok", bad)))
		refused(fmt.Sprintf("gRPC fetch offsets of group %q", "g-"+bad), call("FetchOffsets", strs("g-"+bad, "r")))
		// group, member id, client id, topic of the Groups RPCs.
		refused("JoinGroup with a group id not UTF-8", groups("JoinGroup", strs("g-"+bad, "", "", "r")))
		refused("JoinGroup with a member id not UTF-8", groups("JoinGroup", strs("j", "m-"+bad, "", "r")))
		refused("JoinGroup with a client id not UTF-8", groups("JoinGroup", strs("j", "", "c-"+bad, "r")))
		refused("JoinGroup with a topic not UTF-8", groups("JoinGroup", strs("j", "", "", "r"+bad)))
		refused("Heartbeat with a member id not UTF-8", groups("Heartbeat", strs("j", "m-"+bad)))
		refused("LeaveGroup with a group id not UTF-8", groups("LeaveGroup", strs("g-"+bad, "m")))
		refused("CommitGroupOffsets with a member id not UTF-8", groups("CommitGroupOffsets", strs("j", "m-"+bad)))
	}
	refused("broken wire format", call("CommitOffsets", []byte{0x0a, 0x7f, 'x'}))
	gs, err := c.ListGroups(ctx)
	if err != nil || len(gs) != 1 || gs[0].Group != "ok" {
		t.Fatalf("Cap'n Proto ListGroups = %+v, %v; want only %q", gs, err, "ok")
	}
	offs, err := c.FetchOffsets(ctx, "ok", "r")
	if err != nil || len(offs) != 1 || offs[0].Metadata != "fine" {
		t.Fatalf("Cap'n Proto FetchOffsets(ok) = %+v, %v; want the first commit alone", offs, err)
	}
}
