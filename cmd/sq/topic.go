package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api"
	"github.com/seedqueue/sq/sdk"
)

func newTopicCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe, alter and delete topics",
		Args:  topicSubcommand,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newTopicCreateCommand(g), newTopicListCommand(g), newTopicDescribeCommand(g), newTopicDeleteCommand(g), newTopicAlterCommand(g), newTopicRestoreCommand(g))
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// rpk's `topic add-partitions T --num N` fails on --num before
		// the arguments are checked.
		if args := cmd.Flags().Args(); len(args) > 0 && addPartitionsWords[args[0]] {
			return topicSubcommand(cmd, args)
		}
		return flagError(cmd, err)
	})
	return cmd
}

// addPartitionsWords are the commands other tools name the growth of a
// topic with (rpk topic add-partitions, Kafka's CreatePartitions).
var addPartitionsWords = map[string]bool{"add-partitions": true, "create-partitions": true}

// topicSubcommand is noArgs for sq topic, which points rpk's
// add-partitions (and kafka-topics' --alter --partitions words) to sq
// topic alter --partitions.
func topicSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) > 0 && addPartitionsWords[args[0]] {
		name := "NAME"
		if len(args) > 1 {
			name = args[1]
		}
		return fmt.Errorf("sq topic has no %s command: grow a topic with sq topic alter %s --partitions N, N the new total (as kafka-topics --alter --partitions; rpk topic add-partitions --num counts the ones added)", args[0], name)
	}
	return noArgs(cmd, args)
}

// topicCreateFlags are the flags of `sq topic create`; zero means "the
// server's default".
type topicCreateFlags struct {
	partitions     uint32
	syncPolicy     string
	retentionMs    int64
	retentionBytes int64
	segmentBytes   int64
	segmentMs      int64
	// replicationFactor is --replication-factor: 0 is the server's
	// default (--default-replication-factor of sq-server).
	replicationFactor int32
	// minInsync is --min-insync-replicas: 0 is the server's default (2
	// when the replication factor is 3 or more, else 1).
	minInsync int32
	// unclean is --unclean-leader-election.
	unclean bool
	// localRetentionMs and localRetentionBytes are --local-retention-ms
	// and --local-retention-bytes: -2 the same as the whole log's
	// retention, -1 unlimited, 0 the server's default.
	localRetentionMs    int64
	localRetentionBytes int64
}

func newTopicCreateCommand(g *globals) *cobra.Command {
	var f topicCreateFlags
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic",
		Long: "Create the topic NAME with --partitions partitions (numbered 0..N-1).\n" +
			"Topic names are 1 to 249 characters of [a-zA-Z0-9._-], not \".\" or \"..\", and\n" +
			"do not start with \"__\". Settings left at 0 or empty take the server's defaults.\n" +
			"--replication-factor N places N replicas of each partition on distinct nodes of\n" +
			"the cluster (at most the number of nodes; 0: the server's default, min(3, live\n" +
			"nodes)); a single node outside a cluster holds 1.\n" +
			"--min-insync-replicas N: in a cluster, a publish with acks all is refused\n" +
			"(NOT_ENOUGH_REPLICAS, retriable) while fewer than N replicas are in sync (1 to\n" +
			"the replication factor; 0: 2 when the factor is 3 or more, else 1).\n" +
			"--unclean-leader-election lets a replica that is not in sync lead when no in-sync\n" +
			"replica is alive: the partition stays available, and acknowledged records may be\n" +
			"lost (docs/cluster.md).\n" +
			"--local-retention-ms and --local-retention-bytes (local.retention.ms and\n" +
			"local.retention.bytes, Kafka KIP-405) bound what stays on local disk with tiered\n" +
			"storage; --retention-ms and --retention-bytes still bound the whole log, remote\n" +
			"included. -2 (the default): the same as the whole log's; -1 unlimited (only with\n" +
			"an unlimited whole log); else at most the whole log's. They take effect with\n" +
			"tiered storage.",
		Example: "  sq topic create orders --partitions 3\n" +
			"  sq topic create payments --partitions 6 --replication-factor 3 --min-insync-replicas 2\n" +
			"  sq topic create audit --sync-policy every-batch --retention-ms 86400000 --segment-bytes 268435456",
		Args: oneNewTopicName,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTopicCreate(cmd, g, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.Uint32Var(&f.partitions, "partitions", 1, "number of partitions, at least 1")
	fl.StringVar(&f.syncPolicy, "sync-policy", "", "when records are fdatasync'd: every-batch, none, or an interval in milliseconds (N or Nms); empty: the server's --sync-policy")
	fl.Int64Var(&f.retentionMs, "retention-ms", 0, "delete segments older than this many milliseconds; -1 keeps them forever; 0: server default (7 days)")
	fl.Int64Var(&f.retentionBytes, "retention-bytes", 0, "delete the oldest segments while a partition is larger than this many bytes; -1 unlimited; 0: server default")
	fl.Int64Var(&f.segmentBytes, "segment-bytes", 0, "size of one segment file in bytes; at least the server's batch limit plus 4096 (--max-batch-bytes of sq-server, 16 MiB by default); 0: server default (--segment-bytes of sq-server)")
	fl.Int64Var(&f.segmentMs, "segment-ms", 0, "roll the active segment this many milliseconds after its first record, so quiet partitions age out; 0: server default (7 days)")
	fl.Int32Var(&f.replicationFactor, "replication-factor", 0, "replicas of each partition, on distinct nodes (at most the cluster's node count); 0: the server's --default-replication-factor")
	fl.Int32Var(&f.minInsync, "min-insync-replicas", 0, "in-sync replicas a publish with acks all needs (1 to the replication factor); 0: server default (2 when the replication factor is 3 or more, else 1)")
	fl.BoolVar(&f.unclean, "unclean-leader-election", false, "when no in-sync replica is alive, let another replica lead (available, but acknowledged records may be lost)")
	fl.Int64Var(&f.localRetentionMs, "local-retention-ms", 0, "with tiered storage, keep records on local disk this many milliseconds, at most --retention-ms; -2 the same as --retention-ms; -1 unlimited (only with --retention-ms -1); 0: server default (--local-retention-ms of sq-server, -2)")
	fl.Int64Var(&f.localRetentionBytes, "local-retention-bytes", 0, "with tiered storage, keep at most this many bytes per partition on local disk, at most --retention-bytes; -2 the same as --retention-bytes; -1 unlimited (only with --retention-bytes -1); 0: server default (--local-retention-bytes of sq-server, -2)")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		err = flagError(cmd, err)
		if strings.Contains(err.Error(), "'p' in -p") {
			// rpk topic create takes -p for the partition count.
			return fmt.Errorf("%w: the partition count is --partitions N, as in sq topic create %s --partitions 3 (-p names one partition in sq produce and sq consume)", err, topicNameOr(cmd))
		}
		return err
	})
	return cmd
}

// topicNameOr returns the topic NAME given to cmd, or "NAME" when there
// is none yet, for examples in messages.
func topicNameOr(cmd *cobra.Command) string {
	if args := cmd.Flags().Args(); len(args) > 0 && args[0] != "" {
		return args[0]
	}
	return "NAME"
}

func runTopicCreate(cmd *cobra.Command, g *globals, name string, f topicCreateFlags) error {
	if f.partitions == 0 {
		return errors.New("--partitions must be at least 1")
	}
	if f.replicationFactor < 0 {
		return fmt.Errorf("--replication-factor %d: want at least 1, or 0 for the server's default", f.replicationFactor)
	}
	if f.minInsync < 0 {
		return fmt.Errorf("--min-insync-replicas %d: want 1 to the replication factor, or 0 for the server's default", f.minInsync)
	}
	if err := checkLocalRetentionFlags(f.localRetentionMs, f.localRetentionBytes); err != nil {
		return err
	}
	cfg := sdk.TopicConfig{
		SyncPolicy:     f.syncPolicy,
		RetentionMs:    f.retentionMs,
		RetentionBytes: f.retentionBytes,
		SegmentBytes:   f.segmentBytes,
		SegmentMs:      f.segmentMs,
		// 0: the server's default.
		ReplicationFactor:     uint32(f.replicationFactor),
		MinInsyncReplicas:     f.minInsync,
		UncleanLeaderElection: f.unclean,
		LocalRetentionMs:      f.localRetentionMs,
		LocalRetentionBytes:   f.localRetentionBytes,
	}
	c, err := g.dial(cmd)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.CreateTopic(cmd.Context(), name, f.partitions, cfg)
	if err != nil {
		return apiError(g.addr(cmd), err)
	}
	fmt.Fprintf(g.stdout, "created topic %s with %d partition%s", info.Name, info.Partitions, plural(int(info.Partitions)))
	if f.replicationFactor > 0 && info.ReplicationFactor > 0 {
		// Said when asked for: the factor the server applied.
		fmt.Fprintf(g.stdout, ", replication factor %d", info.ReplicationFactor)
	}
	fmt.Fprintln(g.stdout)
	return nil
}

func newTopicListCommand(g *globals) *cobra.Command {
	var format *adminFormat
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List topics with their partition counts and settings",
		Example: "  sq topic list\n  sq topic list -f json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			c, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			topics, err := c.ListTopics(cmd.Context())
			if err != nil {
				return apiError(g.addr(cmd), err)
			}
			if asJSON {
				return printTopicListJSON(g.stdout, topics)
			}
			return printTopicList(g.stdout, topics)
		},
	}
	format = addAdminFormatFlag(cmd)
	return cmd
}

func printTopicList(out io.Writer, topics []sdk.TopicInfo) error {
	if len(topics) == 0 {
		_, err := fmt.Fprintln(out, "no topics")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "TOPIC\tPARTITIONS\tSYNC POLICY\tRETENTION\tRETENTION BYTES\tSEGMENT BYTES")
	for _, t := range topics {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", t.Name, t.Partitions, orDash(t.Config.SyncPolicy),
			formatMs(t.Config.RetentionMs), formatLimitBytes(t.Config.RetentionBytes), formatLimitBytes(t.Config.SegmentBytes))
	}
	return w.Flush()
}

func newTopicDescribeCommand(g *globals) *cobra.Command {
	var format *adminFormat
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Show a topic's settings and the state of each partition",
		Long: "Show the topic's id (a UUID made when the topic was created: a topic deleted and\n" +
			"created again under the same name has a new one), its effective settings and,\n" +
			"per partition, the log start offset\n" +
			"(first offset still stored), the high watermark (first offset not yet readable),\n" +
			"the log end offset (offset of the next record), the size on disk and the number\n" +
			"of segment files, and where it lives in the cluster: its leader (node id), the\n" +
			"leader epoch (bumped at every leadership change), its replicas and in-sync\n" +
			"replicas. A failed partition (FAILED), or one whose leader is not available\n" +
			"(UNAVAILABLE), shows - for its statistics and its error.",
		Example: "  sq topic describe orders\n  sq topic describe orders -f json",
		Args:    oneTopicName,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			c, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.DescribeTopic(cmd.Context(), args[0])
			if err != nil {
				return apiError(g.addr(cmd), err)
			}
			v := topicView{TopicInfo: info, placed: true}
			if asJSON {
				return writeJSON(g.stdout, toTopicViewJSON(v))
			}
			return printTopicDescription(g.stdout, v)
		},
	}
	format = addAdminFormatFlag(cmd)
	return cmd
}

// topicView is a topic as sq shows it: the SDK's TopicInfo and whether
// to show where it lives in the cluster (placed): the replication factor
// and each partition's leader, leader epoch, replicas and in-sync
// replicas (docs/cluster.md). topic describe shows them; the answers of
// create-partitions and alter are shown without.
type topicView struct {
	sdk.TopicInfo
	placed bool
}

// printTopicDescription prints the topic's settings and its partitions;
// the replication factor and the LEADER, EPOCH, REPLICAS and ISR columns
// when t carries its placement; with tiered storage (a partition carries
// remote stats) LOG START reads LOCAL START and the REMOTE START, REMOTE
// SEGS, REMOTE SIZE and UPLOAD LAG columns follow SEGMENTS.
func printTopicDescription(out io.Writer, t topicView) error {
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	cfg := t.Config
	fmt.Fprintf(w, "Topic:\t%s\n", t.Name)
	fmt.Fprintf(w, "Topic ID:\t%s\n", orDash(t.ID.String()))
	fmt.Fprintf(w, "Partitions:\t%d\n", t.Partitions)
	if t.placed && t.ReplicationFactor > 0 {
		fmt.Fprintf(w, "Replication factor:\t%d\n", t.ReplicationFactor)
	}
	fmt.Fprintf(w, "Sync policy:\t%s\n", orDash(cfg.SyncPolicy))
	fmt.Fprintf(w, "Retention:\t%s\n", formatMs(cfg.RetentionMs))
	fmt.Fprintf(w, "Retention bytes:\t%s\n", formatLimitBytes(cfg.RetentionBytes))
	fmt.Fprintf(w, "Segment bytes:\t%s\n", formatLimitBytes(cfg.SegmentBytes))
	fmt.Fprintf(w, "Segment roll:\t%s\n", formatMs(cfg.SegmentMs))
	fmt.Fprintf(w, "Max record bytes:\t%s\n", formatLimitBytes(int64(cfg.MaxRecordBytes)))
	// 0: not set on the topic; the cluster applies its default.
	fmt.Fprintf(w, "Min in-sync:\t%s\n", orDash(formatCount(cfg.MinInsyncReplicas)))
	fmt.Fprintf(w, "Unclean election:\t%t\n", cfg.UncleanLeaderElection)
	fmt.Fprintf(w, "Local retention:\t%s\n", formatLocalRetention(cfg.LocalRetentionMs, "retention.ms", formatMs))
	fmt.Fprintf(w, "Local retention bytes:\t%s\n", formatLocalRetention(cfg.LocalRetentionBytes, "retention.bytes", formatLimitBytes))
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	w = tabwriter.NewWriter(out, 0, 8, 2, ' ', tabwriter.AlignRight)
	placed, tiered := t.placed, isTiered(t.TopicInfo)
	header := "PARTITION\tLOG START\tHIGH WATERMARK\tLOG END\tSIZE\tSEGMENTS\tSTATUS\t"
	if tiered {
		header = "PARTITION\tLOCAL START\tHIGH WATERMARK\tLOG END\tSIZE\tSEGMENTS\tREMOTE START\tREMOTE SEGS\tREMOTE SIZE\tUPLOAD LAG\tSTATUS\t"
	}
	if placed {
		header += "LEADER\tEPOCH\tREPLICAS\tISR\t"
	}
	fmt.Fprintln(w, header)
	var errs []string
	for _, p := range t.PartitionInfos {
		if p.Err != nil {
			fmt.Fprintf(w, "%d\t-\t-\t-\t-\t-\t", p.Partition)
			if tiered {
				fmt.Fprint(w, "-\t-\t-\t-\t")
			}
			fmt.Fprintf(w, "%s\t", partitionStatus(p.Err))
			errs = append(errs, fmt.Sprintf("partition %d: %v", p.Partition, p.Err))
		} else {
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%s\t%d\t", p.Partition, p.LogStartOffset, p.HighWatermark, p.LogEndOffset, formatBytes(p.SizeBytes), p.SegmentCount)
			if tiered {
				fmt.Fprint(w, remoteColumns(p.Remote))
			}
			fmt.Fprint(w, "ok\t")
		}
		if placed {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t", orDash(p.Leader), p.LeaderEpoch, nodeList(p.Replicas), nodeList(p.ISR))
		}
		fmt.Fprintln(w)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, e := range errs {
		fmt.Fprintln(out, e)
	}
	return nil
}

// isTiered reports whether t was described by a server with tiered
// storage on: a partition carries remote stats.
func isTiered(t sdk.TopicInfo) bool {
	for _, p := range t.PartitionInfos {
		if p.Remote != nil {
			return true
		}
	}
	return false
}

// remoteColumns formats the REMOTE START, REMOTE SEGS, REMOTE SIZE and
// UPLOAD LAG cells of a partition (tab-terminated): REMOTE START is "-"
// while the remote log holds no segment; UPLOAD LAG is the sealed
// segments not uploaded yet and their size ("0" when none). r nil (a
// partition without stats): "-" in each.
func remoteColumns(r *sdk.RemoteStats) string {
	if r == nil {
		return "-\t-\t-\t-\t"
	}
	start := "-"
	if r.Segments > 0 {
		start = strconv.FormatUint(r.LogStartOffset, 10)
	}
	lag := "0"
	if r.LagSegments > 0 || r.LagBytes > 0 {
		lag = fmt.Sprintf("%d (%s)", r.LagSegments, formatBytes(r.LagBytes))
	}
	return fmt.Sprintf("%s\t%d\t%s\t%s\t", start, r.Segments, formatBytes(r.Bytes), lag)
}

// partitionStatus is the STATUS of a partition whose statistics came with
// err: UNAVAILABLE when its leader is not available (in a cluster, that
// node is down; its offsets are unknown, not failed), FAILED otherwise.
func partitionStatus(err error) string {
	if errors.Is(err, api.ErrLeaderNotAvailable) {
		return "UNAVAILABLE"
	}
	return "FAILED"
}

// nodeList formats node ids as a comma-separated list, "-" when empty.
func nodeList(ids []string) string {
	return orDash(strings.Join(ids, ","))
}

// apiError returns the catalog error in err's chain (printed "NAME:
// message"), a connection error naming addr, or err itself.
func apiError(addr string, err error) error {
	var wp *sdk.WrongProtocolError
	if errors.Is(err, sdk.ErrConnection) || errors.As(err, &wp) {
		return connectError(addr, err)
	}
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	return err
}

// formatCount formats a count setting, "" when 0 (unset).
func formatCount(n int32) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(int(n))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatMs formats a duration setting in milliseconds: -1 is unlimited, 0
// unset.
func formatMs(ms int64) string {
	switch {
	case ms < 0:
		return "unlimited"
	case ms == 0:
		return "-"
	}
	return strconv.FormatInt(ms, 10) + " ms (" + humanMs(ms) + ")"
}

func humanMs(ms int64) string {
	const (
		sec  = 1000
		min  = 60 * sec
		hour = 60 * min
		day  = 24 * hour
	)
	switch {
	case ms%day == 0:
		return fmt.Sprintf("%dd", ms/day)
	case ms%hour == 0:
		return fmt.Sprintf("%dh", ms/hour)
	case ms%min == 0:
		return fmt.Sprintf("%dm", ms/min)
	case ms%sec == 0:
		return fmt.Sprintf("%ds", ms/sec)
	}
	return fmt.Sprintf("%dms", ms)
}

// formatLimitBytes formats a size setting: -1 is unlimited, 0 unset.
// formatLocalRetention formats local.retention.ms or local.retention.bytes
// (v) with format: -2 is "same as " the whole log's setting (total), 0
// (a server that does not know the setting) "-".
func formatLocalRetention(v int64, total string, format func(int64) string) string {
	if v == sdk.LocalRetentionDefault {
		return "same as " + total
	}
	return format(v)
}

// checkLocalRetentionFlags refuses --local-retention-ms and
// --local-retention-bytes below -2 before the server is asked; the server
// checks them against the whole log's retention.
func checkLocalRetentionFlags(ms, bytes int64) error {
	if ms < sdk.LocalRetentionDefault {
		return fmt.Errorf("--local-retention-ms %d: want -2 (the same as --retention-ms), -1 (unlimited), a duration in ms, or 0 for the server's default", ms)
	}
	if bytes < sdk.LocalRetentionDefault {
		return fmt.Errorf("--local-retention-bytes %d: want -2 (the same as --retention-bytes), -1 (unlimited), a size in bytes, or 0 for the server's default", bytes)
	}
	return nil
}

func formatLimitBytes(n int64) string {
	switch {
	case n < 0:
		return "unlimited"
	case n == 0:
		return "-"
	}
	return formatBytes(n)
}

// formatBytes formats n bytes exactly below 1 KiB and in binary units with
// one decimal above.
func formatBytes(n int64) string {
	if n < 1024 {
		return strconv.FormatInt(n, 10) + " B"
	}
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB"}
	v := float64(n) / 1024
	u := 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + units[u]
}
