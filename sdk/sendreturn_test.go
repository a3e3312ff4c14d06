package sdk

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// Once Send (or SendBatch) has returned because its context ended or its
// DeliveryTimeout passed, none of its records is handed to the connection
// any more: the pipeline's goroutine, which may be about to send the
// call's batch at that very moment, hands it over before the call returns
// or not at all. The connection's count of issued frames must not move
// after the call returned and the pipeline went idle; the topic's
// metadata and the producer id are read before the first call, so every
// frame counted is a publish.
func TestNoRecordSentAfterTheCallReturned(t *testing.T) {
	s := newFakeServer(t)
	s.createTopic("t", 1)
	for _, tc := range []struct {
		name   string
		cancel bool // cancel the call's context; else a tiny DeliveryTimeout ends it
	}{{"context cancelled", true}, {"delivery timeout", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProducer(t, s, func(c *ProducerConfig) {
				if !tc.cancel {
					c.DeliveryTimeout = 30 * time.Microsecond
				}
			})
			cn := p.client.live() // dialed by NewProducer
			if cn == nil {
				t.Fatal("no connection after NewProducer")
			}
			// The topic's metadata and the producer id are read first, so
			// that every frame the connection issues from here on is one
			// of the calls' publishes (the metadata request of a call that
			// gave up goes on after it returned, on the core's goroutine),
			// and so that the calls get as far as the hand-over of their
			// batch (a call that obtains the producer id itself rarely
			// does within the tiny DeliveryTimeout).
			if _, err := p.core.topic(testCtx(t), "t"); err != nil {
				t.Fatalf("metadata: %v", err)
			}
			if _, _, err := p.idem.identity(testCtx(t), producerID{}, idSource{addr: p.client.cfg.Addr, ask: p.client.initProducerID}); err != nil {
				t.Fatalf("producer id: %v", err)
			}
			const rounds = 400
			late, handed := 0, 0
			for range rounds {
				before := cn.issued.Load()
				ctx, cancel := context.WithCancel(context.Background())
				if tc.cancel {
					// Cancelled around the moment the batch is sent.
					go func() {
						time.Sleep(time.Duration(rand.IntN(40)) * time.Microsecond)
						cancel()
					}()
				}
				_, err := p.Send(ctx, "t", nil, []byte("x"))
				issued := cn.issued.Load()
				if issued != before {
					handed++
				}
				waitFor(t, 10*time.Second, "the pipeline to be idle", func() bool {
					p.pl.mu.Lock()
					defer p.pl.mu.Unlock()
					for _, pp := range p.pl.parts {
						if pp.running {
							return false
						}
					}
					return true
				})
				if err != nil && cn.issued.Load() != issued {
					late++
				}
				cancel()
				if cn != p.client.live() {
					t.Fatal("the connection changed")
				}
			}
			t.Logf("%d of %d calls handed their batch to the connection", handed, rounds)
			if late > 0 {
				t.Errorf("%d of %d failed calls had their record sent after they returned", late, rounds)
			}
		})
	}
}
