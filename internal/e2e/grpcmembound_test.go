package e2e

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// h2Frame returns one HTTP/2 frame (RFC 9113 §4.1).
func h2Frame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := make([]byte, 9, 9+len(payload))
	b[0], b[1], b[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	b[3], b[4] = typ, flags
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// hpackLiteral appends a header field as a literal without indexing and
// with a new name (RFC 7541 §6.2.2); name and value under 127 bytes.
func hpackLiteral(b []byte, name, value string) []byte {
	b = append(b, 0, byte(len(name)))
	b = append(b, name...)
	b = append(b, byte(len(value)))
	return append(b, value...)
}

// h2Staller is a gRPC client on one raw HTTP/2 connection that opens
// streams of one method and sends, on each, a 5-byte message prefix
// declaring declared bytes and then all of them but the last, within the
// flow-control windows the server grants, without ever finishing.
type h2Staller struct {
	nc   net.Conn
	wmu  sync.Mutex
	mu   sync.Mutex
	cond *sync.Cond
	conn int64            // connection window
	win  map[uint32]int64 // stream windows; absent: reset by the server
	init int64
}

func newH2Staller(t *testing.T, addr string) *h2Staller {
	s := &h2Staller{nc: dialRaw(t, addr), win: map[uint32]int64{}, conn: 65535, init: 65535}
	s.cond = sync.NewCond(&s.mu)
	_ = s.write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), h2Frame(4, 0, 0, nil)...))
	go s.read()
	return s
}

func (s *h2Staller) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.nc.Write(b)
	return err
}

// read follows the server's SETTINGS, WINDOW_UPDATE, RST_STREAM and PING
// frames until the connection closes.
func (s *h2Staller) read() {
	defer func() {
		s.mu.Lock()
		s.conn = -1 << 40 // closed: every writer stops
		s.cond.Broadcast()
		s.mu.Unlock()
	}()
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(s.nc, hdr); err != nil {
			return
		}
		p := make([]byte, int(hdr[0])<<16|int(hdr[1])<<8|int(hdr[2]))
		if _, err := io.ReadFull(s.nc, p); err != nil {
			return
		}
		id := binary.BigEndian.Uint32(hdr[5:]) & 0x7fffffff
		s.mu.Lock()
		switch typ, flags := hdr[3], hdr[4]; {
		case typ == 4 && flags&1 == 0: // SETTINGS
			for i := 0; i+6 <= len(p); i += 6 {
				if binary.BigEndian.Uint16(p[i:]) == 4 { // INITIAL_WINDOW_SIZE
					v := int64(binary.BigEndian.Uint32(p[i+2:]))
					for k := range s.win {
						s.win[k] += v - s.init
					}
					s.init = v
				}
			}
			go func() { _ = s.write(h2Frame(4, 1, 0, nil)) }()
		case typ == 8: // WINDOW_UPDATE
			inc := int64(binary.BigEndian.Uint32(p) & 0x7fffffff)
			if id == 0 {
				s.conn += inc
			} else if _, ok := s.win[id]; ok {
				s.win[id] += inc
			}
		case typ == 3: // RST_STREAM
			delete(s.win, id)
		case typ == 6 && flags&1 == 0: // PING
			go func() { _ = s.write(h2Frame(6, 1, 0, p)) }()
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// open opens stream id on path; streams must be opened in increasing id
// order (RFC 9113 §5.1.1).
func (s *h2Staller) open(id uint32, path string) {
	var hb []byte
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "sq"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		hb = hpackLiteral(hb, f[0], f[1])
	}
	s.mu.Lock()
	s.win[id] = s.init
	s.mu.Unlock()
	_ = s.write(h2Frame(1, 4, id, hb)) // HEADERS, END_HEADERS
}

// stall sends on stream id a message of declared bytes but its last byte.
func (s *h2Staller) stall(id uint32, declared int) { s.send(id, declared, nil) }

// send sends on stream id a message of declared bytes: with fill, the
// pattern repeated, all of it, ending the stream; without, zeros but the
// last byte.
func (s *h2Staller) send(id uint32, declared int, fill []byte) {
	chunk := make([]byte, 16384)
	prefix := make([]byte, 5)
	binary.BigEndian.PutUint32(prefix[1:], uint32(declared))
	copy(chunk, prefix)
	left, pos := declared+5-1, 0
	if fill != nil {
		left++
		for i := 5; i < len(chunk); i++ {
			chunk[i] = fill[(i-5)%len(fill)]
		}
	}
	for left > 0 {
		n := min(left, len(chunk))
		s.mu.Lock()
		for {
			w, open := s.win[id]
			if !open || s.conn < 0 {
				s.mu.Unlock()
				return
			}
			if w >= int64(n) && s.conn >= int64(n) {
				break
			}
			s.cond.Wait()
		}
		s.win[id] -= int64(n)
		s.conn -= int64(n)
		s.mu.Unlock()
		var end byte
		if fill != nil && n == left {
			end = 1 // END_STREAM
		}
		if s.write(h2Frame(0, end, id, chunk[:n])) != nil {
			return
		}
		pos += n
		chunk = make([]byte, 16384) // the prefix only in the first
		for i := range chunk {
			if fill != nil {
				chunk[i] = fill[(pos-5+i)%len(fill)]
			}
		}
		left -= n
	}
}

// TestGRPCMemoryBoundAgainstAmplifiedRequests runs a real sq-server with
// the default limits and sends, on 2 gRPC connections, 20 Publish and 20
// CommitOffsets calls each of a whole 8 MiB message of empty records or
// entries (2 bytes each, some 100 times that once decoded: any one of them
// decoded would pass rssAnonLimit). They are refused with
// MESSAGE_TOO_LARGE before they are decoded; RssAnon, sampled throughout,
// stays under rssAnonLimit.
func TestGRPCMemoryBoundAgainstAmplifiedRequests(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	grpcAddr, httpAddr := controlAddrs(t, srv)
	pid := srv.cmd.Process.Pid
	peak := rssAnon(t, pid)
	base := peak
	var writers sync.WaitGroup
	var stallers []*h2Staller
	defer func() {
		for _, s := range stallers {
			s.nc.Close()
		}
		writers.Wait()
	}()
	for _, m := range []struct {
		path string
		elem []byte
	}{{"/sq.v1.Messaging/Publish", []byte{0x1a, 0}}, {"/sq.v1.Messaging/CommitOffsets", []byte{0x12, 0}}} {
		s := newH2Staller(t, grpcAddr)
		stallers = append(stallers, s)
		for i := range 20 {
			s.open(uint32(2*i+1), m.path)
			writers.Go(func() { s.send(uint32(2*i+1), 8<<20, m.elem) })
		}
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	deadline := time.Now().Add(2 * time.Minute)
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		case <-time.After(20 * time.Millisecond): // sampling interval, not a wait for state
		}
		r := rssAnon(t, pid)
		peak = max(peak, r)
		if r >= rssAnonLimit {
			t.Fatalf("RssAnon %d MiB, limit %d MiB", r>>20, rssAnonLimit>>20)
		}
		if time.Now().After(deadline) {
			t.Fatal("the 40 calls were not all sent or refused within 2 minutes")
		}
	}
	for metricValue(t, httpAddr, "sq_grpc_request_budget_used_bytes") != 0 {
		r := rssAnon(t, pid)
		peak = max(peak, r)
		if r >= rssAnonLimit {
			t.Fatalf("RssAnon %d MiB, limit %d MiB", r>>20, rssAnonLimit>>20)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v bytes of the budget still held after every call was sent",
				metricValue(t, httpAddr, "sq_grpc_request_budget_used_bytes"))
		}
		time.Sleep(20 * time.Millisecond) // sampling interval, not a wait for state
	}
	t.Logf("RssAnon %d MiB before, peak %d MiB", base>>20, peak>>20)
}

// TestGRPCMemoryBoundAgainstStalledCalls runs a real sq-server with the
// default limits (the receive timeout raised so that it cannot be what
// frees memory) and opens, on 2 gRPC connections, 200 Publish calls that
// each send all of a 16 MiB message but its last byte. The calls that fit
// the request budget are charged before any of their bytes are read, 64
// more wait for a charge with at most their 1 MiB flow-control window
// received, the others are refused; RssAnon, sampled throughout, stays under
// rssAnonLimit, and the data plane serves sq produce and sq consume
// meanwhile.
func TestGRPCMemoryBoundAgainstStalledCalls(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir(), "--frame-read-timeout", "10m")
	grpcAddr, httpAddr := controlAddrs(t, srv)
	sqOK(t, srv.addr, nil, "topic", "create", "m")
	pid := srv.cmd.Process.Pid
	const perCall = 34 << 20 // 2 × (--max-batch-bytes + 1 MiB)
	granted := float64(budgetBytes / perCall)
	const waiting = 64 // calls admitted to wait for a charge (control.maxWaitingCalls)
	peak := rssAnon(t, pid)
	base := peak
	sample := func() int64 {
		r := rssAnon(t, pid)
		peak = max(peak, r)
		if r >= rssAnonLimit {
			t.Fatalf("RssAnon %d MiB, limit %d MiB", r>>20, rssAnonLimit>>20)
		}
		return r
	}
	var writers sync.WaitGroup
	var stallers []*h2Staller
	defer func() {
		for _, s := range stallers {
			s.nc.Close()
		}
		writers.Wait()
	}()
	for range 2 {
		s := newH2Staller(t, grpcAddr)
		stallers = append(stallers, s)
		for i := range 100 {
			s.open(uint32(2*i+1), "/sq.v1.Messaging/Publish")
			writers.Go(func() { s.stall(uint32(2*i+1), api16MiB) })
		}
	}
	deadline := time.Now().Add(time.Minute)
	for metricValue(t, httpAddr, "sq_grpc_request_budget_used_bytes") != granted*perCall ||
		metricValue(t, httpAddr, "sq_grpc_throttled_calls_total") != 200-granted-waiting ||
		sample()-base < int64(granted)*(api16MiB-2<<20) {
		if time.Now().After(deadline) {
			t.Fatalf("budget %v bytes held, %v calls refused, RssAnon grew %d MiB; want %v held, %v refused and the granted calls' bytes read",
				metricValue(t, httpAddr, "sq_grpc_request_budget_used_bytes"), metricValue(t, httpAddr, "sq_grpc_throttled_calls_total"),
				(sample()-base)>>20, granted*perCall, 200-granted-waiting)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval, not a wait for state
	}
	sqOK(t, srv.addr, []byte("during\n"), "produce", "--topic", "m")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "m", "--from", "earliest"); out != "during\n" {
		t.Fatalf("sq consume during the stalled calls: %q", out)
	}
	sample()
	t.Logf("RssAnon %d MiB before, peak %d MiB", base>>20, peak>>20)
}

// api16MiB is the declared size of each stalled message: the default
// batch limit, below the receive limit.
const api16MiB = 16 << 20

// request sends msg as the one message of stream id and ends the stream's
// sending side (a unary or server-streaming request).
func (s *h2Staller) request(id uint32, msg []byte) {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	_ = s.write(h2Frame(0, 1, id, append(b, msg...))) // DATA, END_STREAM
}

// TestGRPCMemoryBoundAgainstUnreadSubscriptions runs a real sq-server
// with the default limits and opens, on 2 gRPC connections that never
// grant the server more than HTTP/2's initial 64 KiB window, 200
// Subscribe streams asking for 2 GiB at a time of a partition holding
// 24 MiB. RssAnon, sampled throughout, stays under rssAnonLimit, the
// responses the server holds for them stay within half the request budget,
// and the data plane serves sq produce and sq consume meanwhile.
func TestGRPCMemoryBoundAgainstUnreadSubscriptions(t *testing.T) {
	t.Parallel()
	srv := startServer(t, t.TempDir())
	grpcAddr, httpAddr := controlAddrs(t, srv)
	sqOK(t, srv.addr, nil, "topic", "create", "big", "--sync-policy", "none")
	line := bytes.Repeat([]byte("x"), 1000_000)
	sqOK(t, srv.addr, bytes.Repeat(append(line, '\n'), 24), "produce", "--topic", "big")
	pid := srv.cmd.Process.Pid
	peak := rssAnon(t, pid)
	base := peak
	sample := func() {
		r := rssAnon(t, pid)
		peak = max(peak, r)
		if r >= rssAnonLimit {
			t.Fatalf("RssAnon %d MiB, limit %d MiB", r>>20, rssAnonLimit>>20)
		}
	}
	// SubscribeRequest{topic: "big", max_bytes: 2^31-1}.
	req := []byte{0x0a, 3, 'b', 'i', 'g', 0x30, 0xff, 0xff, 0xff, 0xff, 0x07}
	for range 2 {
		s := newH2Staller(t, grpcAddr)
		for i := range 100 {
			s.open(uint32(2*i+1), "/sq.v1.Messaging/Subscribe")
			s.request(uint32(2*i+1), req)
			sample()
		}
	}
	// The streams are in once the responses the server holds for them
	// (sq_grpc_subscribe_response_bytes: the budget's share of responses
	// being sent, apart from requests being received) fill a good part of
	// the half they may take. Where below half they stop depends on the
	// sizes of the responses in flight, so the wait asks for a quarter.
	const metric = "sq_grpc_subscribe_response_bytes"
	deadline := time.Now().Add(2 * time.Minute)
	for metricValue(t, httpAddr, metric) < budgetBytes/4 {
		sample()
		if time.Now().After(deadline) {
			t.Fatalf("responses hold %v bytes of the budget after 2 minutes, want a quarter of %d or more",
				metricValue(t, httpAddr, metric), budgetBytes)
		}
		time.Sleep(20 * time.Millisecond) // sampling interval, not a wait for state
	}
	if v := metricValue(t, httpAddr, metric); v > budgetBytes/2 {
		t.Fatalf("responses hold %v bytes, above half the budget %d", v, budgetBytes)
	}
	sqOK(t, srv.addr, nil, "topic", "create", "m")
	sqOK(t, srv.addr, []byte("during\n"), "produce", "--topic", "m")
	if out := sqOK(t, srv.addr, nil, "consume", "--topic", "m", "--from", "earliest"); out != "during\n" {
		t.Fatalf("sq consume during the unread subscriptions: %q", out)
	}
	sample()
	t.Logf("RssAnon %d MiB before, peak %d MiB", base>>20, peak>>20)
}
