package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/sdk"
)

// adminFormats are the values of -f/--format of the admin commands (topic
// list and describe, group list and describe, cluster info), matched
// case-insensitively: text is the tables for people, json one JSON
// document on stdout for programs (the shapes below; README.md, CLI).
var adminFormats = []string{"text", "json"}

// adminFormat is the value of an admin command's -f/--format flag.
type adminFormat struct{ value string }

// addAdminFormatFlag registers -f/--format on cmd.
func addAdminFormatFlag(cmd *cobra.Command) *adminFormat {
	f := &adminFormat{}
	cmd.Flags().StringVarP(&f.value, "format", "f", "text", "output format: text or json (one JSON document; field names in README.md)")
	return f
}

// json reports whether --format asks for JSON; an unknown value is an
// error that lists the accepted ones.
func (f *adminFormat) json() (bool, error) {
	v := strings.ToLower(f.value)
	if !slices.Contains(adminFormats, v) {
		return false, fmt.Errorf("--format %q: want one of %s", f.value, strings.Join(adminFormats, ", "))
	}
	return v == "json", nil
}

// writeJSON writes v as one indented JSON document and a newline.
func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// topicJSON is a topic in `topic list` ({"topics": [...]}) and `topic
// describe` (the object itself, with partitions) --format json.
type topicJSON struct {
	Name           string          `json:"name"`
	TopicID        string          `json:"topic_id"` // UUID; "" from a server without topic ids
	PartitionCount uint32          `json:"partition_count"`
	Config         topicConfigJSON `json:"config"`
	// ReplicationFactor is set by topic describe only.
	ReplicationFactor uint32 `json:"replication_factor,omitempty"`
	// Partitions is set by topic describe only.
	Partitions []partitionJSON `json:"partitions,omitempty"`
}

// topicConfigJSON is a topic's effective config; -1 means unlimited for
// the retention settings.
type topicConfigJSON struct {
	SyncPolicy     string `json:"sync_policy"`
	RetentionMs    int64  `json:"retention_ms"`
	RetentionBytes int64  `json:"retention_bytes"`
	SegmentBytes   int64  `json:"segment_bytes"`
	SegmentMs      int64  `json:"segment_ms"`
	MaxRecordBytes int32  `json:"max_record_bytes"`
	// MinInsyncReplicas is min.insync.replicas; 0: not set on the topic
	// (the cluster's default applies).
	MinInsyncReplicas     int32 `json:"min_insync_replicas"`
	UncleanLeaderElection bool  `json:"unclean_leader_election"`
	// LocalRetentionMs and LocalRetentionBytes are local.retention.ms and
	// local.retention.bytes: -2 the same as retention_ms /
	// retention_bytes, -1 unlimited; 0: a server that does not know them.
	LocalRetentionMs    int64 `json:"local_retention_ms"`
	LocalRetentionBytes int64 `json:"local_retention_bytes"`
}

// partitionJSON is one partition in topic describe; a partition that is
// failed or whose leader is not available has error set and null
// statistics (unknown, not 0).
type partitionJSON struct {
	Partition      uint32  `json:"partition"`
	LogStartOffset *uint64 `json:"log_start_offset"`
	HighWatermark  *uint64 `json:"high_watermark"`
	LogEndOffset   *uint64 `json:"log_end_offset"`
	SizeBytes      *int64  `json:"size_bytes"`
	SegmentCount   *uint32 `json:"segment_count"`
	Error          string  `json:"error,omitempty"`
	// The placement, from topic describe: leader (node id), leader_epoch,
	// replicas (first: preferred leader) and isr (in-sync replicas).
	*placementJSON
	// The remote log, present only with tiered storage on (and left out
	// with the statistics of a partition that has error set).
	*remoteJSON
}

// remoteJSON is one partition's remote log (tiered storage) and upload
// lag. The remote log offsets are null while it holds no segment;
// remote_bytes and upload_lag_bytes count the segments' batches, in
// bytes; the lag is as of the leader's last upload pass.
type remoteJSON struct {
	RemoteLogStartOffset *uint64 `json:"remote_log_start_offset"`
	RemoteLogEndOffset   *uint64 `json:"remote_log_end_offset"`
	RemoteSegments       uint32  `json:"remote_segments"`
	RemoteBytes          int64   `json:"remote_bytes"`
	UploadLagSegments    uint32  `json:"upload_lag_segments"`
	UploadLagBytes       int64   `json:"upload_lag_bytes"`
}

// toRemoteJSON converts r (nil: nil).
func toRemoteJSON(r *sdk.RemoteStats) *remoteJSON {
	if r == nil {
		return nil
	}
	out := &remoteJSON{RemoteSegments: r.Segments, RemoteBytes: r.Bytes, UploadLagSegments: r.LagSegments, UploadLagBytes: r.LagBytes}
	if r.Segments > 0 {
		start, end := r.LogStartOffset, r.EndOffset
		out.RemoteLogStartOffset, out.RemoteLogEndOffset = &start, &end
	}
	return out
}

// placementJSON is one partition's placement in the cluster.
type placementJSON struct {
	Leader      string   `json:"leader"`
	LeaderEpoch uint32   `json:"leader_epoch"`
	Replicas    []string `json:"replicas"`
	ISR         []string `json:"isr"`
}

// toTopicViewJSON is toTopicJSON with the replication factor and each
// partition's placement.
func toTopicViewJSON(v topicView) topicJSON {
	out := toTopicJSON(v.TopicInfo)
	if !v.placed {
		return out
	}
	out.ReplicationFactor = v.ReplicationFactor
	for i, pl := range v.PartitionInfos {
		out.Partitions[i].placementJSON = &placementJSON{Leader: pl.Leader, LeaderEpoch: pl.LeaderEpoch,
			Replicas: append([]string{}, pl.Replicas...), ISR: append([]string{}, pl.ISR...)}
	}
	return out
}

func toTopicJSON(t sdk.TopicInfo) topicJSON {
	out := topicJSON{Name: t.Name, PartitionCount: t.Partitions, Config: topicConfigJSON{
		SyncPolicy: t.Config.SyncPolicy, RetentionMs: t.Config.RetentionMs, RetentionBytes: t.Config.RetentionBytes,
		SegmentBytes: t.Config.SegmentBytes, SegmentMs: t.Config.SegmentMs, MaxRecordBytes: t.Config.MaxRecordBytes,
		MinInsyncReplicas: t.Config.MinInsyncReplicas, UncleanLeaderElection: t.Config.UncleanLeaderElection,
		LocalRetentionMs: t.Config.LocalRetentionMs, LocalRetentionBytes: t.Config.LocalRetentionBytes}}
	if !t.ID.IsZero() {
		out.TopicID = t.ID.String()
	}
	for _, p := range t.PartitionInfos {
		pj := partitionJSON{Partition: p.Partition, LogStartOffset: &p.LogStartOffset, HighWatermark: &p.HighWatermark,
			LogEndOffset: &p.LogEndOffset, SizeBytes: &p.SizeBytes, SegmentCount: &p.SegmentCount, remoteJSON: toRemoteJSON(p.Remote)}
		if p.Err != nil {
			pj = partitionJSON{Partition: p.Partition, Error: p.Err.Error()}
		}
		out.Partitions = append(out.Partitions, pj)
	}
	return out
}

// topicListJSON is `topic list --format json`.
type topicListJSON struct {
	Topics []topicJSON `json:"topics"` // sorted by name; [] when there are none
}

func printTopicListJSON(out io.Writer, topics []sdk.TopicInfo) error {
	doc := topicListJSON{Topics: []topicJSON{}}
	for _, t := range topics {
		doc.Topics = append(doc.Topics, toTopicJSON(t))
	}
	return writeJSON(out, doc)
}

// groupSummaryJSON is a group in `group list --format json` ({"groups":
// [...]}).
type groupSummaryJSON struct {
	Group       string `json:"group"`
	State       string `json:"state"` // empty, stable or rebalancing
	MemberCount uint32 `json:"member_count"`
	Generation  int32  `json:"generation"`
}

// groupListJSON is `group list --format json`.
type groupListJSON struct {
	Groups []groupSummaryJSON `json:"groups"` // [] when there are none
}

func printGroupListJSON(out io.Writer, groups []sdk.GroupSummary) error {
	doc := groupListJSON{Groups: []groupSummaryJSON{}}
	for _, s := range groups {
		doc.Groups = append(doc.Groups, groupSummaryJSON{Group: s.Group, State: s.State, MemberCount: s.Members, Generation: s.Generation})
	}
	return writeJSON(out, doc)
}

// groupJSON is `group describe --format json`.
type groupJSON struct {
	groupSummaryJSON
	Members []groupMemberJSON `json:"members"`
	Offsets []groupOffsetJSON `json:"offsets"`
}

// groupMemberJSON is one member; assignment maps a topic to its
// partitions held by the member.
type groupMemberJSON struct {
	MemberID   string              `json:"member_id"`
	ClientID   string              `json:"client_id"`
	Assignment map[string][]uint32 `json:"assignment"`
}

// groupOffsetJSON is one partition of the group's topics; committed_offset
// and member_id are null when the group has no commit or no holder;
// log_end_offset, high_watermark and lag are null when the partition's
// statistics are unknown (in a cluster, its leader is not available; the
// server sends lag -1 and zero offsets).
type groupOffsetJSON struct {
	Topic           string  `json:"topic"`
	Partition       uint32  `json:"partition"`
	CommittedOffset *int64  `json:"committed_offset"`
	LogEndOffset    *uint64 `json:"log_end_offset"`
	HighWatermark   *uint64 `json:"high_watermark"`
	Lag             *int64  `json:"lag"`
	MemberID        *string `json:"member_id"`
}

func printGroupJSON(out io.Writer, d sdk.GroupDescription) error {
	s := d.Summary
	doc := groupJSON{groupSummaryJSON: groupSummaryJSON{Group: s.Group, State: s.State, MemberCount: s.Members, Generation: s.Generation},
		Members: []groupMemberJSON{}, Offsets: []groupOffsetJSON{}}
	for _, m := range d.Members {
		a := map[string][]uint32{}
		for t, ps := range m.Assignment {
			a[t] = slices.Sorted(slices.Values(ps))
		}
		doc.Members = append(doc.Members, groupMemberJSON{MemberID: m.MemberID, ClientID: m.ClientID, Assignment: a})
	}
	for _, o := range d.Offsets {
		oj := groupOffsetJSON{Topic: o.Topic, Partition: o.Partition}
		if o.Lag >= 0 {
			oj.LogEndOffset, oj.HighWatermark, oj.Lag = &o.LogEndOffset, &o.HighWatermark, &o.Lag
		}
		if o.CommittedOffset >= 0 {
			oj.CommittedOffset = &o.CommittedOffset
		}
		if o.MemberID != "" {
			oj.MemberID = &o.MemberID
		}
		doc.Offsets = append(doc.Offsets, oj)
	}
	return writeJSON(out, doc)
}
