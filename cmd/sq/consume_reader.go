package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/seedqueue/sq/sdk"
)

// Both forms of `sq consume` read through sdk.Consumer: with --group as a
// member of the group (consume_group.go), without it over the partitions
// and from the start positions sq resolved itself (consume.go). What they
// share is here: the consumer's connection settings and the check that
// the server still answers while the consumer, which retries in the
// background, returns nothing.

// newConsumer starts the sdk.Consumer of a `sq consume` run; tests replace
// it to see every read go through a Consumer.
var newConsumer = sdk.NewConsumer

// consumerBase is the configuration every consumer of `sq consume` starts
// from: the server at addr reached within timeout (--timeout), topic,
// long polls of followMaxWait, each request bounded by consumeRequestTimeout
// and reconnections at most consumeReconnectBackoffMax apart, over TLS
// with tc when it is not nil, authenticated with sasl when it is not nil.
func consumerBase(addr, topic string, timeout time.Duration, tc *tls.Config, sasl sdk.SASLMechanism) sdk.ConsumerConfig {
	return sdk.ConsumerConfig{
		TLSConfig:           tc,
		SASL:                sasl,
		Addr:                addr,
		ClientID:            "sq-cli",
		Topic:               topic,
		MaxWait:             followMaxWait,
		DialTimeout:         timeout,
		RequestTimeout:      consumeRequestTimeout,
		ReconnectBackoffMax: consumeReconnectBackoffMax,
	}
}

// serverProbe checks, at most every probeInterval while Poll returns
// nothing, that the server answers. Without --follow an unreachable server
// fails the command; with --follow it is reported once per outage (and its
// return once) while the consumer keeps retrying in the background.
type serverProbe struct {
	addr    string
	topic   string
	follow  bool
	timeout time.Duration // each probe's bound: --timeout
	stderr  io.Writer
	// reading says what failed, for the error without --follow:
	// "reading orders", "reading orders as group billing".
	reading   string
	last      time.Time
	unreached bool // the last probe failed (reported once per outage)
}

// idle is called when Poll returned nothing: it probes the server when
// probeInterval has passed since the last probe.
func (p *serverProbe) idle(ctx context.Context, c *sdk.Client) error {
	if time.Since(p.last) < probeInterval {
		return nil
	}
	p.last = time.Now()
	pctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	_, err := c.DescribeTopic(pctx, p.topic)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// The probe's own bound passed: the server accepted the request
		// and did not answer (stopped, or overloaded), which is a lost
		// server as much as a refused connection is.
		err = fmt.Errorf("%w: no answer within %v (--timeout)", sdk.ErrConnection, p.timeout)
	}
	switch {
	case err == nil:
		p.answered()
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case !p.follow:
		return fmt.Errorf("%s: %w", p.reading, err)
	case !p.unreached:
		fmt.Fprintf(p.stderr, "sq: %s: %v; retrying until it answers (Ctrl-C stops)\n", p.addr, err)
	}
	p.unreached = true
	return nil
}

// answered is called when the server answered (records arrived, or a
// probe succeeded): the end of an outage is said once.
func (p *serverProbe) answered() {
	if p.unreached {
		fmt.Fprintf(p.stderr, "sq: %s answers again\n", p.addr)
	}
	p.unreached = false
}
