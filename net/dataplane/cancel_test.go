package dataplane

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/engine"
	"github.com/seedqueue/sq/internal/longpoll"
)

// spinLimit is the number of fetches of one test after which a push loop
// is taken to spin: the broker fails the test and answers with an error, so
// that the loop ends instead of hanging the bubble.
const spinLimit = 10000

// countingBroker counts the fetches of a memBroker. With empty, it answers
// every fetch at once with no records, as a broker that cannot wait would.
type countingBroker struct {
	*memBroker
	t       testing.TB
	empty   bool
	fetches atomic.Int64
}

func (b *countingBroker) FetchID(ctx context.Context, topic string, id api.TopicID, partition int, offset uint64, maxBytes int, maxWait time.Duration) (*engine.FetchResult, error) {
	if n := b.fetches.Add(1); n > spinLimit {
		if n == spinLimit+1 {
			b.t.Errorf("%d fetches: the push loop spins", n)
		}
		return nil, api.NewError(api.CodeUnknown, "spinning")
	}
	if b.empty {
		return &engine.FetchResult{}, nil
	}
	return b.memBroker.FetchID(ctx, topic, id, partition, offset, maxBytes, maxWait)
}

// pipeConn is one connection of a server over net.Pipe, for tests inside a
// synctest bubble; a goroutine reads the server's frames.
type pipeConn struct {
	t      *testing.T
	srv    *Server
	c      *conn
	client net.Conn
	served chan struct{} // closed when serve returned
	read   chan struct{} // closed when the reader saw the end of the stream

	mu     sync.Mutex
	finals map[uint64]bool // subscriptions whose final push arrived
}

func startPipeConn(t *testing.T, b Broker) *pipeConn {
	srv, err := New(b, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	p := &pipeConn{t: t, srv: srv, client: client, served: make(chan struct{}), read: make(chan struct{}), finals: map[uint64]bool{}}
	p.c, _, _ = srv.newConn(server)
	go func() {
		defer close(p.served)
		defer srv.connWG.Done()
		p.c.serve()
	}()
	go p.readLoop()
	p.send(0, handshakeReq)
	t.Cleanup(func() {
		client.Close()
		srv.Close()
		<-p.read
	})
	return p
}

func (p *pipeConn) readLoop() {
	defer close(p.read)
	fr := api.NewFrameReader(p.client, 1<<20, 1<<30)
	for {
		msg, f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		n := api.TailLength(f)
		if f.Which() == api.Frame_Which_pushBatches && n == 0 {
			p.mu.Lock()
			p.finals[f.CorrelationId()] = true
			p.mu.Unlock()
		}
		msg.Release()
		if _, err := fr.ReadTail(n, nil); err != nil {
			return
		}
	}
}

func (p *pipeConn) send(id uint64, build func(api.Frame) error) {
	if _, err := p.client.Write(frameBytes(p.t, id, build, nil)); err != nil {
		p.t.Fatalf("write request %d: %v", id, err)
	}
}

func (p *pipeConn) subscriptions() int {
	p.c.subs.mu.Lock()
	defer p.c.subs.mu.Unlock()
	return len(p.c.subs.m)
}

func (p *pipeConn) ended(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.finals[id]
}

// A push subscription ends as soon as its connection or its subscription
// does, whether the broker is waiting in a long poll, answers a cancelled
// long poll with an empty result (as the fake broker of FuzzServerFrame
// did when its loop spun), or never waits at all. Inside the bubble, "as
// soon as" is exact: the loop must end without the fake clock moving.
func TestPushEndsWithItsConnection(t *testing.T) {
	ends := []struct {
		name string
		end  func(p *pipeConn)
		// connEnds: the whole connection ends, not only the subscription.
		connEnds bool
	}{
		{"client closes", func(p *pipeConn) { p.client.Close() }, true},
		{"unsubscribe", func(p *pipeConn) { p.send(9, unsubscribeReq(1)) }, false},
		{"server Close", func(p *pipeConn) { go p.srv.Close() }, true},
		{"server Shutdown", func(p *pipeConn) { go func() { _ = p.srv.Shutdown(context.Background()) }() }, true},
	}
	for _, tc := range ends {
		for _, empty := range []bool{false, true} {
			name := tc.name + "/long poll"
			if empty {
				name = tc.name + "/no wait"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := &countingBroker{memBroker: newMemBroker(), t: t, empty: empty}
					if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
						t.Fatal(err)
					}
					p := startPipeConn(t, b)
					p.send(1, subscribeReq("t", 0, 0, 1<<20))
					// Let the subscription fetch (and, without wait, pause).
					time.Sleep(time.Second)
					synctest.Wait()
					if p.subscriptions() != 1 || b.fetches.Load() == 0 {
						t.Fatalf("subscription not running: %d subscriptions, %d fetches", p.subscriptions(), b.fetches.Load())
					}
					tc.end(p)
					synctest.Wait()
					if p.subscriptions() != 0 {
						t.Fatal("the subscription still runs after its end")
					}
					if tc.connEnds {
						select {
						case <-p.served:
						default:
							t.Fatal("the connection still runs after its end")
						}
					} else if !p.ended(1) {
						t.Fatal("no final push after unsubscribe")
					}
				})
			})
		}
	}
}

// An empty fetch that returns before its long poll ran out is followed by a
// pause, so a broker that never waits cannot make a subscription spin: in a
// minute, it is asked at most once per longpoll.PauseMax.
func TestPushPausesAfterAnEarlyEmptyFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &countingBroker{memBroker: newMemBroker(), t: t, empty: true}
		if _, err := b.CreateTopic("t", 1, engine.TopicConfig{}); err != nil {
			t.Fatal(err)
		}
		p := startPipeConn(t, b)
		p.send(1, subscribeReq("t", 0, 0, 1<<20))
		const d = time.Minute
		time.Sleep(d)
		synctest.Wait()
		if n, most := b.fetches.Load(), int64(d/longpoll.PauseMax)+2; n > most || n < 2 {
			t.Fatalf("%d fetches in %v, want 2..%d", n, d, most)
		}
	})
}
