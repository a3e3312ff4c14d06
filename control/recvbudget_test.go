package control_test

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// stallConn passes the first limit bytes written, then blocks every write
// until release is closed: a client that stops in the middle of a message.
type stallConn struct {
	net.Conn
	mu      sync.Mutex
	left    int
	release <-chan struct{}
}

func (c *stallConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	n := min(len(p), c.left)
	c.left -= n
	c.mu.Unlock()
	if n > 0 {
		if _, err := c.Conn.Write(p[:n]); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		<-c.release
		return n, net.ErrClosed
	}
	return n, nil
}

// stallingClient returns a gRPC client whose connection stops sending
// after limit bytes; it is closed at the end of the test.
func stallingClient(t *testing.T, addr string, limit int) *grpc.ClientConn {
	t.Helper()
	release := make(chan struct{})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
			nc, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
			if err != nil {
				return nil, err
			}
			return &stallConn{Conn: nc, left: limit, release: release}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(release); cc.Close() })
	return cc
}

// throttled reports whether err is the THROTTLED refusal of a spent
// request budget.
func throttled(err error) bool {
	st, _ := status.FromError(err)
	return st.Code() == codes.ResourceExhausted && errorReason(st) == "THROTTLED"
}

// Calls that stop in the middle of their request message, and calls that
// stream no message, hold at most the request budget (docs/operations.md,
// "Memory bounds"): once it is spent further calls wait for their charge
// before any byte of their message is read, up to 64 of them, and the
// others are refused with THROTTLED; after the receive timeout the stalled
// calls are cancelled and the waiting ones served.
func TestGRPCRequestBudget(t *testing.T) {
	const batch = 1 << 20
	perCall := int64(2 * (batch + 1<<20)) // twice the receive limit: batch + 1 MiB of framing
	cases := []struct {
		name  string
		stall func(t *testing.T, n *node, ctx context.Context)
	}{
		{"publish stalled mid-message", func(t *testing.T, n *node, ctx context.Context) {
			cc := stallingClient(t, n.grpcAddr, 128<<10)
			req := &sqv1.PublishRequest{Topic: "t", Records: []*sqv1.Record{{Value: make([]byte, batch-4096)}}}
			go func() { _, _ = sqv1.NewMessagingClient(cc).Publish(ctx, req) }()
		}},
		{"create topic stalled mid-message", func(t *testing.T, n *node, ctx context.Context) {
			cc := stallingClient(t, n.grpcAddr, 128<<10)
			req := &sqv1.CreateTopicRequest{Name: string(make([]byte, batch-4096)), Partitions: 1}
			go func() { _, _ = sqv1.NewTopicsClient(cc).CreateTopic(ctx, req) }()
		}},
		{"publish stream sending nothing", func(t *testing.T, n *node, ctx context.Context) {
			cc, err := grpc.NewClient(n.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			if _, err := sqv1.NewMessagingClient(cc).PublishStream(ctx); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := startNode(t, control.Options{MaxBatchBytes: batch, MaxInflightRequestBytes: 2 * perCall,
				RecvTimeout: 5 * time.Second})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			topics := sqv1.NewTopicsClient(n.conn)
			list := func() error {
				cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
				defer ccancel()
				_, err := topics.ListTopics(cctx, &sqv1.ListTopicsRequest{})
				return err
			}
			if err := list(); err != nil {
				t.Fatalf("ListTopics before the stall: %v", err)
			}
			for range 2 { // what the budget holds
				tc.stall(t, n, ctx)
			}
			eventually(t, "the budget spent by the stalled calls", func() bool {
				return value(scrape(t, n), "sq_grpc_request_budget_used_bytes", nil) == float64(2*perCall)
			})
			// 70 more calls: 64 wait, the rest are refused at once; the
			// waiting ones are served once the stalled calls are
			// cancelled by the receive timeout.
			const calls, waiting = 70, 64
			errs := make(chan error, calls)
			var wg sync.WaitGroup
			for range calls {
				wg.Go(func() { errs <- list() })
			}
			wg.Wait()
			close(errs)
			served, refused := 0, 0
			for err := range errs {
				switch {
				case err == nil:
					served++
				case throttled(err):
					refused++
				default:
					t.Errorf("ListTopics: %v, want success or THROTTLED", err)
				}
			}
			if served != waiting || refused != calls-waiting {
				t.Errorf("%d served and %d refused, want %d served (waiting for the stalled calls' charges) and %d refused",
					served, refused, waiting, calls-waiting)
			}
			if v := value(scrape(t, n), "sq_grpc_throttled_calls_total", nil); v != calls-waiting {
				t.Fatalf("sq_grpc_throttled_calls_total = %v, want %d", v, calls-waiting)
			}
			eventually(t, "the stalled calls cancelled after the receive timeout", func() bool {
				return list() == nil && value(scrape(t, n), "sq_grpc_request_budget_used_bytes", nil) == 0
			})
		})
	}
}

// A budget that cannot hold one request of the receive limit is refused.
func TestGRPCRequestBudgetValidate(t *testing.T) {
	_, err := control.New(control.Options{MaxBatchBytes: 1 << 20, MaxInflightRequestBytes: 4<<20 - 1})
	if err == nil {
		t.Fatal("control.New accepted a request budget below one request")
	}
	if _, err := control.New(control.Options{MaxBatchBytes: 1 << 20, MaxInflightRequestBytes: 4 << 20}); err != nil {
		t.Fatalf("control.New with a budget of exactly one request: %v", err)
	}
}

// Subscribe streams whose client stops reading hold at most half the
// request budget in responses (docs/operations.md, "Memory bounds"):
// another subscription then waits for room and, after the receive
// timeout, ends with THROTTLED; once the stalled client leaves, it reads
// every record.
func TestGRPCSubscribeBudget(t *testing.T) {
	const budget = 32 << 20
	n := startNode(t, control.Options{MaxBatchBytes: 1 << 20, MaxInflightRequestBytes: budget, RecvTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "big", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	msg := sqv1.NewMessagingClient(n.conn)
	const records, valueBytes = 280, 60 << 10
	for i := 0; i < records; i += 4 {
		req := &sqv1.PublishRequest{Topic: "big"}
		for range 4 {
			req.Records = append(req.Records, &sqv1.Record{Value: make([]byte, valueBytes)})
		}
		if _, err := msg.Publish(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	// A client that never reads: the server may write 64 KiB per stream.
	stalled, err := grpc.NewClient(n.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	for range 4 {
		if _, err := sqv1.NewMessagingClient(stalled).Subscribe(sctx, &sqv1.SubscribeRequest{Topic: "big", MaxBytes: 1<<31 - 1}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the stalled streams holding half the budget", func() bool {
		return value(scrape(t, n), "sq_grpc_subscribe_response_bytes", nil) >= budget/2-4<<20
	})
	if v := value(scrape(t, n), "sq_grpc_subscribe_response_bytes", nil); v > budget/2 {
		t.Fatalf("responses hold %v bytes of the budget, above half of %d", v, budget)
	}
	sub, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "big"})
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, err := sub.Recv()
		if err == nil {
			continue // what fitted before the stalled streams took the budget
		}
		if !throttled(err) {
			t.Fatalf("subscription beside the stalled ones: %v, want THROTTLED", err)
		}
		break
	}
	scancel()
	stalled.Close()
	sub, err = msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "big"})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(0)
	for next < records {
		resp, err := sub.Recv()
		if err != nil {
			t.Fatalf("subscription after the stalled client left, at offset %d: %v", next, err)
		}
		for _, r := range resp.Records {
			if r.Offset != next || len(r.Value) != valueBytes {
				t.Fatalf("record at offset %d with %d bytes, want offset %d with %d", r.Offset, len(r.Value), next, valueBytes)
			}
			next++
		}
	}
}

// A request whose decoded form would be many times its wire bytes (very
// many empty records or entries) is charged its estimated decoded size
// before it is decoded: beyond what the budget can hold it is refused
// with MESSAGE_TOO_LARGE, whatever method carries it, and the server
// serves on.
func TestGRPCRequestDecodedSizeCharged(t *testing.T) {
	const batch = 1 << 20
	n := startNode(t, control.Options{MaxBatchBytes: batch, MaxInflightRequestBytes: 16 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Field 3 (records) of PublishRequest, or 2 (offsets) of
	// CommitOffsetsRequest, as empty messages: 2 bytes each.
	for _, tc := range []struct {
		method string
		elem   []byte
	}{{"/sq.v1.Messaging/Publish", []byte{0x1a, 0}}, {"/sq.v1.Messaging/CommitOffsets", []byte{0x12, 0}}} {
		msg := bytes.Repeat(tc.elem, batch/2-8)
		err := n.conn.Invoke(ctx, tc.method, &msg, new([]byte), grpc.ForceCodec(rawCodec{}))
		st, _ := status.FromError(err)
		if st.Code() != codes.ResourceExhausted || errorReason(st) != "MESSAGE_TOO_LARGE" {
			t.Errorf("%s of %d empty elements: %v, want MESSAGE_TOO_LARGE", tc.method, len(msg)/2, err)
		}
	}
	if _, err := sqv1.NewTopicsClient(n.conn).ListTopics(ctx, &sqv1.ListTopicsRequest{}); err != nil {
		t.Fatalf("ListTopics after the refusals: %v", err)
	}
	if v := value(scrape(t, n), "sq_grpc_request_budget_used_bytes", nil); v != 0 {
		t.Fatalf("%v bytes of the budget held after the calls ended", v)
	}
}

// Streams whose clients read never wait on each other for good: with
// more streams reading large backlogs than the responses' half of the
// budget holds at once, each reads every record, none is THROTTLED
// (a stream waiting for room first gives back the charge of the response
// gRPC has written).
func TestGRPCSubscribeBudgetManyReaders(t *testing.T) {
	// Responses of about 4 MiB are charged 8 MiB: 8 at once in the 64 MiB
	// half, fewer than the 12 readers need; the other half lets the 12
	// Subscribe calls (charged 4 MiB while their request arrives) in.
	const budget = 128 << 20
	n := startNode(t, control.Options{MaxBatchBytes: 1 << 20, MaxInflightRequestBytes: budget, RecvTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sqv1.NewTopicsClient(n.conn).CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "big", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	msg := sqv1.NewMessagingClient(n.conn)
	const records, valueBytes = 280, 60 << 10
	for i := 0; i < records; i += 4 {
		req := &sqv1.PublishRequest{Topic: "big"}
		for range 4 {
			req.Records = append(req.Records, &sqv1.Record{Value: make([]byte, valueBytes)})
		}
		if _, err := msg.Publish(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 12)
	for range 12 {
		wg.Go(func() {
			sub, err := msg.Subscribe(ctx, &sqv1.SubscribeRequest{Topic: "big", MaxBytes: 1<<31 - 1})
			if err != nil {
				errs <- err
				return
			}
			for next := uint64(0); next < records; {
				resp, err := sub.Recv()
				if err != nil {
					errs <- err
					return
				}
				for _, r := range resp.Records {
					if r.Offset != next {
						errs <- status.Errorf(codes.Internal, "offset %d, want %d", r.Offset, next)
						return
					}
					next++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("reader: %v", err)
	}
}
