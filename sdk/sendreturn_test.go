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
// after the call returned and the pipeline went idle.
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
			const rounds = 400
			late := 0
			for range rounds {
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
			if late > 0 {
				t.Errorf("%d of %d failed calls had their record sent after they returned", late, rounds)
			}
		})
	}
}
