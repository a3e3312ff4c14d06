package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"capnproto.org/go/capnp/v3"
	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

// partitionPlacement is where one partition lives in the cluster: its
// leader (node id), leader epoch, replica set (first: preferred leader)
// and in-sync replicas (docs/cluster.md).
type partitionPlacement struct {
	Leader      string
	LeaderEpoch uint32
	Replicas    []string
	ISR         []string
}

// topicView is a topic as sq shows it: what the SDK decodes, with the
// replication factor and each partition's placement that the data plane's
// describeTopic and createTopic responses carry (api/sq.capnp TopicInfo,
// PartitionInfo).
type topicView struct {
	sdk.TopicInfo
	// ReplicationFactor is 0 when the answer carried no placement.
	ReplicationFactor uint32
	// Placement is indexed by partition number; nil when not known.
	Placement []partitionPlacement
}

// rawData is one connection to the data plane for the requests whose
// fields the SDK does not carry: a createTopic with a replication factor,
// and the placement of describeTopic. Each request is bounded by the
// context and --timeout.
type rawData struct {
	nc      net.Conn
	fr      *api.FrameReader
	next    uint64
	timeout time.Duration
}

// dialRaw connects to the data plane named by the flags and completes the
// handshake, both within --timeout. Errors name the address and flags as
// g.dial's do.
func (g *globals) dialRaw(cmd *cobra.Command) (*rawData, error) {
	addr := g.addr(cmd)
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: timeout}
	nc, err := d.DialContext(cmd.Context(), "tcp", addr)
	if err != nil {
		return nil, connectError(addr, fmt.Errorf("%w: %w", sdk.ErrConnection, err))
	}
	r := &rawData{nc: nc, fr: api.NewFrameReader(nc, api.DefaultMaxFrameBytes, 0), next: 1, timeout: timeout}
	f, err := r.roundTrip(cmd.Context(), func(f api.Frame) error {
		h, err := f.NewHandshakeRequest()
		if err != nil {
			return err
		}
		h.SetProtocolVersion(api.ProtocolVersion)
		return h.SetClientId("sq-cli")
	})
	if err == nil && f.Which() != api.Frame_Which_handshakeResponse {
		err = fmt.Errorf("handshake: unexpected %v answer", f.Which())
	}
	if err == nil {
		hr, _ := f.HandshakeResponse()
		we, _ := hr.Error()
		err = api.FromWire(we)
	}
	if err != nil {
		nc.Close()
		return nil, connectError(addr, fmt.Errorf("%w: %s: %w", sdk.ErrConnection, addr, err))
	}
	return r, nil
}

// Close closes the connection.
func (r *rawData) Close() error { return r.nc.Close() }

// roundTrip sends the request frame build fills in and reads its answer.
func (r *rawData) roundTrip(ctx context.Context, build func(api.Frame) error) (api.Frame, error) {
	deadline := time.Now().Add(r.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = r.nc.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = r.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	msg, f, err := api.NewFrameMessage(r.next)
	if err != nil {
		return api.Frame{}, err
	}
	r.next++
	if err := build(f); err != nil {
		return api.Frame{}, err
	}
	if err := api.WriteFrame(r.nc, msg); err != nil {
		return api.Frame{}, err
	}
	_, rf, err := r.fr.ReadFrame()
	if err != nil {
		if ctx.Err() != nil {
			return api.Frame{}, context.Cause(ctx)
		}
		return api.Frame{}, err
	}
	if rf.Which() == api.Frame_Which_errorResponse {
		we, _ := rf.ErrorResponse()
		return api.Frame{}, api.FromWire(we)
	}
	return rf, nil
}

// describePlacement asks for topic's replication factor and the placement
// of each of its partitions.
func (r *rawData) describePlacement(ctx context.Context, topic string) (uint32, []partitionPlacement, error) {
	f, err := r.roundTrip(ctx, func(f api.Frame) error {
		d, err := f.NewDescribeTopicRequest()
		if err != nil {
			return err
		}
		return d.SetName(topic)
	})
	if err != nil {
		return 0, nil, err
	}
	if f.Which() != api.Frame_Which_describeTopicResponse {
		return 0, nil, fmt.Errorf("describe topic: unexpected %v answer", f.Which())
	}
	dt, err := f.DescribeTopicResponse()
	if err != nil {
		return 0, nil, err
	}
	if we, _ := dt.Error(); api.FromWire(we) != nil {
		return 0, nil, api.FromWire(we)
	}
	t, err := dt.Topic()
	if err != nil {
		return 0, nil, err
	}
	p, err := decodePlacement(t)
	return t.ReplicationFactor(), p, err
}

// decodePlacement returns the placement of t's partitions, indexed by
// partition number.
func decodePlacement(t api.TopicInfo) ([]partitionPlacement, error) {
	l, err := t.PartitionInfos()
	if err != nil {
		return nil, err
	}
	out := make([]partitionPlacement, t.Partitions())
	for i := 0; i < l.Len(); i++ {
		pi := l.At(i)
		if int(pi.Partition()) >= len(out) {
			continue
		}
		p := &out[pi.Partition()]
		if p.Leader, err = pi.Leader(); err != nil {
			return nil, err
		}
		p.LeaderEpoch = pi.LeaderEpoch()
		if p.Replicas, err = texts(pi.Replicas()); err != nil {
			return nil, err
		}
		if p.ISR, err = texts(pi.Isr()); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func texts(l capnp.TextList, err error) ([]string, error) {
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, l.Len())
	for i := 0; i < l.Len(); i++ {
		s, err := l.At(i)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// createTopic creates a topic with a replication factor (0: the server's
// default) and returns its name, partition count and replication factor.
func (r *rawData) createTopic(ctx context.Context, name string, partitions, rf uint32, cfg sdk.TopicConfig) (topicView, error) {
	f, err := r.roundTrip(ctx, func(f api.Frame) error {
		c, err := f.NewCreateTopicRequest()
		if err != nil {
			return err
		}
		c.SetPartitions(partitions)
		c.SetReplicationFactor(rf)
		if err := c.SetName(name); err != nil {
			return err
		}
		wc, err := c.NewConfig()
		if err != nil {
			return err
		}
		wc.SetSegmentBytes(cfg.SegmentBytes)
		wc.SetRetentionBytes(cfg.RetentionBytes)
		wc.SetRetentionMs(cfg.RetentionMs)
		wc.SetMaxRecordBytes(cfg.MaxRecordBytes)
		wc.SetSegmentMs(cfg.SegmentMs)
		return wc.SetSyncPolicy(cfg.SyncPolicy)
	})
	if err != nil {
		return topicView{}, err
	}
	if f.Which() != api.Frame_Which_createTopicResponse {
		return topicView{}, fmt.Errorf("create topic: unexpected %v answer", f.Which())
	}
	ct, err := f.CreateTopicResponse()
	if err != nil {
		return topicView{}, err
	}
	if we, _ := ct.Error(); api.FromWire(we) != nil {
		return topicView{}, api.FromWire(we)
	}
	t, err := ct.Topic()
	if err != nil {
		return topicView{}, err
	}
	v := topicView{ReplicationFactor: t.ReplicationFactor()}
	v.Partitions = t.Partitions()
	v.Name, err = t.Name()
	return v, err
}
