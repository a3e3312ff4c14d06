package control_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seedqueue/sq/api/sqv1"
	"github.com/seedqueue/sq/control"
)

// A topic's local.retention.ms and local.retention.bytes travel through
// create, describe and alter; -2 (the same as the whole log's) is the
// default; a value below -2, or one that does not fit the whole log's
// retention, is INVALID_CONFIG.
func TestTopicLocalRetention(t *testing.T) {
	n := startNode(t, control.Options{})
	ctx := context.Background()
	topics := sqv1.NewTopicsClient(n.conn)
	cr, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "d", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c := cr.Topic.Config; c.LocalRetentionMs != -2 || c.LocalRetentionBytes != -2 {
		t.Fatalf("default config %v, want local retention -2", c)
	}
	cr, err = topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "l", Partitions: 1,
		Config: &sqv1.TopicConfig{RetentionMs: 7200000, LocalRetentionMs: 3600000, RetentionBytes: 1 << 30, LocalRetentionBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if c := cr.Topic.Config; c.LocalRetentionMs != 3600000 || c.LocalRetentionBytes != 1<<20 {
		t.Fatalf("created config %v", c)
	}
	d, err := topics.DescribeTopic(ctx, &sqv1.DescribeTopicRequest{Name: "l"})
	if err != nil {
		t.Fatal(err)
	}
	if c := d.Topic.Config; c.LocalRetentionMs != 3600000 || c.LocalRetentionBytes != 1<<20 || c.RetentionMs != 7200000 {
		t.Fatalf("described config %v", c)
	}
	ar, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "l", LocalRetentionMs: proto.Int64(-2)})
	if err != nil {
		t.Fatal(err)
	}
	if c := ar.Topic.Config; c.LocalRetentionMs != -2 || c.LocalRetentionBytes != 1<<20 {
		t.Fatalf("altered config %v, want local_retention_ms -2 and local_retention_bytes kept", c)
	}
	ar, err = topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "l", RetentionBytes: proto.Int64(-1), LocalRetentionBytes: proto.Int64(-1)})
	if err != nil {
		t.Fatal(err)
	}
	if c := ar.Topic.Config; c.LocalRetentionBytes != -1 || c.RetentionBytes != -1 {
		t.Fatalf("altered config %v, want both byte retentions unlimited", c)
	}
	for _, tc := range []struct {
		name, want string
		call       func() error
	}{
		{"create local ms above retention", "exceeds retention.ms", func() error {
			_, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "x", Partitions: 1,
				Config: &sqv1.TopicConfig{RetentionMs: 1000, LocalRetentionMs: 1001}})
			return err
		}},
		{"create local bytes unlimited under a limit", "unlimited local retention", func() error {
			_, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "x", Partitions: 1,
				Config: &sqv1.TopicConfig{RetentionBytes: 1 << 20, LocalRetentionBytes: -1}})
			return err
		}},
		{"create local ms -3", "local_retention_ms -3", func() error {
			_, err := topics.CreateTopic(ctx, &sqv1.CreateTopicRequest{Name: "x", Partitions: 1,
				Config: &sqv1.TopicConfig{LocalRetentionMs: -3}})
			return err
		}},
		{"alter local bytes -3", "local_retention_bytes -3", func() error {
			_, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "l", LocalRetentionBytes: proto.Int64(-3)})
			return err
		}},
		{"alter retention under local", "exceeds retention.ms", func() error {
			if _, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "l", LocalRetentionMs: proto.Int64(3600000)}); err != nil {
				return err
			}
			_, err := topics.AlterTopicConfig(ctx, &sqv1.AlterTopicConfigRequest{Name: "l", RetentionMs: proto.Int64(60000)})
			return err
		}},
	} {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument containing %q", tc.name, err, tc.want)
		}
	}
}
