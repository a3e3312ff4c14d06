package control_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/control"
	"github.com/seedqueue/sq/internal/authn"
	"github.com/seedqueue/sq/net/dataplane"
	"github.com/seedqueue/sq/sdk"
)

// TestSDKSCRAM: every SDK client authenticates with SASL: sdk.SCRAM on
// both planes of a node that requires authentication; a wrong password
// and a missing SASL fail with api.ErrAuthenticationFailed, at once
// rather than after endless retries.
func TestSDKSCRAM(t *testing.T) {
	var a *authn.Authenticator
	n, _ := authNode(t, func(o *control.Options) {
		o.AuthRequired = true
		a = o.Authenticator
	})
	dp, err := dataplane.New(n.eng, dataplane.Options{NodeID: "n1", Logger: quietLogger(), AuthRequired: true, Authenticator: a})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	served := make(chan struct{})
	go func() { _ = dp.Serve(ln); close(served) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = dp.Shutdown(ctx)
		<-served
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good, bad := sdk.SCRAM{User: "alice", Password: "pw"}, sdk.SCRAM{User: "alice", Password: "nope"}
	grpcCfg := func(m sdk.SASLMechanism) sdk.GrpcConfig { return sdk.GrpcConfig{Addr: n.grpcAddr, SASL: m} }

	admin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: grpcCfg(good)})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.CreateTopic(ctx, "t", 1, sdk.TopicConfig{}); err != nil {
		t.Fatalf("admin with SCRAM: %v", err)
	}
	for _, m := range []sdk.SASLMechanism{bad, nil} {
		badAdmin, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: grpcCfg(m)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := badAdmin.ListTopics(ctx); !errors.Is(err, api.ErrAuthenticationFailed) {
			t.Errorf("admin with %v: %v, want AUTHENTICATION_FAILED", m, err)
		}
		badAdmin.Close()
	}

	gp, err := sdk.NewGrpcProducer(sdk.GrpcProducerConfig{GrpcConfig: grpcCfg(good)})
	if err != nil {
		t.Fatal(err)
	}
	defer gp.Close()
	if _, err := gp.Send(ctx, "t", nil, []byte("over gRPC")); err != nil {
		t.Fatalf("GrpcProducer: %v", err)
	}
	p, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: ln.Addr().String(), SASL: good})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Send(ctx, "t", nil, []byte("over the data plane")); err != nil {
		t.Fatalf("Producer: %v", err)
	}
	bp, err := sdk.NewBatchProducer(ctx, sdk.BatchProducerConfig{ProducerConfig: sdk.ProducerConfig{Addr: ln.Addr().String(), SASL: good}})
	if err != nil {
		t.Fatal(err)
	}
	bp.Close()
	for _, m := range []sdk.SASLMechanism{bad, nil} {
		q, err := sdk.NewProducer(ctx, sdk.ProducerConfig{Addr: ln.Addr().String(), SASL: m, Retries: 100})
		if err == nil {
			_, err = q.Send(ctx, "t", nil, []byte("x"))
			q.Close()
		}
		if !errors.Is(err, api.ErrAuthenticationFailed) {
			t.Errorf("producer with %v: %v, want AUTHENTICATION_FAILED", m, err)
		}
	}
	c, err := sdk.NewConsumer(ctx, sdk.ConsumerConfig{Addr: ln.Addr().String(), Topic: "t", SASL: good})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got []string
	for len(got) < 2 {
		msgs, err := c.Poll(ctx)
		if err != nil {
			t.Fatalf("consumer: %v", err)
		}
		for _, m := range msgs {
			got = append(got, string(m.Value))
		}
	}
	gc, err := sdk.NewGrpcConsumer(ctx, sdk.GrpcConsumerConfig{GrpcConfig: grpcCfg(good), Topic: "t", MaxWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	if msgs, err := gc.Poll(ctx); err != nil || len(msgs) == 0 {
		t.Fatalf("GrpcConsumer: %d records, %v", len(msgs), err)
	}
}

// TestSDKTokenRenewed: a token the node no longer knows (expired on the
// server's clock here; a restart does the same) is replaced by a new
// exchange, and the unary call that met the refusal is retried once.
func TestSDKTokenRenewed(t *testing.T) {
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	n, _ := authNode(t, func(o *control.Options) {
		o.AuthRequired = true
		o.Sessions = authn.NewSessions(time.Hour, 0, now)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: n.grpcAddr, SASL: sdk.SCRAM{User: "alice", Password: "pw"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.ListTopics(ctx); err != nil {
		t.Fatal(err)
	}
	skew.Store(int64(2 * time.Hour))
	if _, err := a.ListTopics(ctx); err != nil {
		t.Fatalf("after the token expired on the server: %v", err)
	}
}
