package sdk

import (
	"errors"
	"testing"

	"github.com/seedqueue/sq/api"
)

// local.retention.ms and local.retention.bytes travel through both
// planes: CreateTopic and DescribeTopic over Cap'n Proto (Client) and
// CreateTopic, AlterTopicConfig and DescribeTopic over gRPC (Admin);
// the default is LocalRetentionDefault (-2).
func TestTopicLocalRetention(t *testing.T) {
	b := startBroker(t)
	grpcAddr := serveGrpc(t, b)
	ctx := testCtx(t)
	c, err := Dial(ctx, ClientConfig{Addr: b.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, err := NewAdmin(AdminConfig{GrpcConfig: GrpcConfig{Addr: grpcAddr}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	set := TopicConfig{RetentionMs: 7200000, LocalRetentionMs: 3600000, RetentionBytes: 1 << 30, LocalRetentionBytes: 1 << 20}
	if ti, err := c.CreateTopic(ctx, "c", 1, set); err != nil || ti.Config.LocalRetentionMs != 3600000 || ti.Config.LocalRetentionBytes != 1<<20 {
		t.Fatalf("Client.CreateTopic: %+v %v", ti.Config, err)
	}
	if ti, err := a.CreateTopic(ctx, "g", 1, set); err != nil || ti.Config.LocalRetentionMs != 3600000 || ti.Config.LocalRetentionBytes != 1<<20 {
		t.Fatalf("Admin.CreateTopic: %+v %v", ti.Config, err)
	}
	if ti, err := c.CreateTopic(ctx, "d", 1, TopicConfig{}); err != nil || ti.Config.LocalRetentionMs != LocalRetentionDefault || ti.Config.LocalRetentionBytes != LocalRetentionDefault {
		t.Fatalf("Client.CreateTopic with the defaults: %+v %v", ti.Config, err)
	}
	for _, name := range []string{"c", "g"} {
		ti, err := c.DescribeTopic(ctx, name)
		if err != nil || ti.Config.LocalRetentionMs != 3600000 || ti.Config.LocalRetentionBytes != 1<<20 {
			t.Fatalf("Client.DescribeTopic(%s): %+v %v", name, ti.Config, err)
		}
		ti, err = a.DescribeTopic(ctx, name)
		if err != nil || ti.Config.LocalRetentionMs != 3600000 || ti.Config.LocalRetentionBytes != 1<<20 {
			t.Fatalf("Admin.DescribeTopic(%s): %+v %v", name, ti.Config, err)
		}
	}
	ms := int64(LocalRetentionDefault)
	ti, err := a.AlterTopicConfig(ctx, "c", TopicConfigChange{LocalRetentionMs: &ms})
	if err != nil || ti.Config.LocalRetentionMs != LocalRetentionDefault || ti.Config.LocalRetentionBytes != 1<<20 {
		t.Fatalf("AlterTopicConfig: %+v %v", ti.Config, err)
	}
	if _, err := c.CreateTopic(ctx, "x", 1, TopicConfig{RetentionMs: 1000, LocalRetentionMs: -1}); !errors.Is(err, api.ErrInvalidConfig) {
		t.Fatalf("Client.CreateTopic with unlimited local retention under retention.ms 1000: %v", err)
	}
	big := int64(1 << 31)
	if _, err := a.AlterTopicConfig(ctx, "g", TopicConfigChange{LocalRetentionBytes: &big}); !errors.Is(err, api.ErrInvalidConfig) {
		t.Fatalf("AlterTopicConfig above retention.bytes: %v", err)
	}
}
