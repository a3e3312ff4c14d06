package main

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seedqueue/sq/sdk"
)

// controlEnv is the environment variable read when --control is not given;
// defaultControl is the address used when neither is set (the default of
// sq-server --grpc-host).
const (
	controlEnv     = "SQ_CONTROL"
	defaultControl = sdk.DefaultControlAddr
)

// controlAddr returns the control-plane address: --control when given,
// else SQ_CONTROL, else the default.
func (g *globals) controlAddr(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("control"); f != nil && f.Changed {
		return g.control
	}
	if v := g.getenv(controlEnv); v != "" {
		return v
	}
	return g.control
}

// admin returns an Admin for the control plane named by the flags, once
// it has checked, within --timeout, that the address answers as SQ's
// control plane (sdk.Admin.Connect).
func (g *globals) admin(cmd *cobra.Command) (*sdk.Admin, error) {
	timeout, err := g.connectTimeout(cmd)
	if err != nil {
		return nil, err
	}
	addr := g.controlAddr(cmd)
	a, err := sdk.NewAdmin(sdk.AdminConfig{GrpcConfig: sdk.GrpcConfig{Addr: addr, RequestTimeout: 30 * time.Second, ConnectTimeout: timeout, TLSConfig: g.tlsConf, SASL: g.sasl}})
	if err != nil {
		return nil, controlError(addr, err)
	}
	if err := a.Connect(cmd.Context()); err != nil {
		a.Close()
		return nil, controlError(addr, err)
	}
	return a, nil
}

// controlError explains a control-plane failure: another protocol at the
// address, no answer within --timeout, unreachable, not offered by this
// server, or a catalog error ("NAME: message").
func controlError(addr string, err error) error {
	var wp *sdk.WrongProtocolError
	if errors.As(err, &wp) {
		return explain(err, "%s; set the address with --control or %s", wp.Message(), controlEnv)
	}
	var ae *sdk.AddrError
	if errors.As(err, &ae) {
		return explain(err, "%s (set it with --control or %s)", ae.Message(), controlEnv)
	}
	var te *sdk.ConnectTimeoutError
	if errors.As(err, &te) {
		return explain(err, "no answer from the SQ control plane at %s within %v (%s; set the bound with --timeout or %s, the address with --control or %s)",
			addr, te.Timeout, te.Stage, timeoutEnv, controlEnv)
	}
	if errors.Is(err, sdk.ErrConnection) {
		return fmt.Errorf("cannot reach the SQ control plane at %s (set the address with --control or %s): %w", addr, controlEnv, err)
	}
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unimplemented {
		return errors.New(st.Message())
	}
	return apiError(addr, err)
}

// topicAlterFlags are the flags of `sq topic alter`; only the flags given
// change the config.
type topicAlterFlags struct {
	syncPolicy     string
	retentionMs    int64
	retentionBytes int64
	segmentMs      int64
	maxRecordBytes int32
	minInsync      int32
	unclean        bool
	partitions     int64 // the new total with --partitions
	// localRetentionMs and localRetentionBytes: -2 the same as the whole
	// log's retention, -1 unlimited, 0 back to the server's default.
	localRetentionMs    int64
	localRetentionBytes int64
}

// alterableSettings are the flags of `sq topic alter`: the settings the
// server changes on a live topic (engine.AlterTopicConfig). segment.bytes
// is fixed when the topic is created.
const alterableSettings = "--sync-policy, --retention-ms, --retention-bytes, --segment-ms, --max-record-bytes, --min-insync-replicas, --unclean-leader-election, --local-retention-ms, --local-retention-bytes"

// runTopicAddPartitions grows topic name to total partitions
// (engine.CreatePartitions), refusing --partitions beside a config flag:
// the two are separate changes on the server, and one could be made
// without the other.
func runTopicAddPartitions(cmd *cobra.Command, g *globals, name string, total int64) error {
	var others []string
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if strings.Contains(alterableSettings, "--"+fl.Name) {
			others = append(others, "--"+fl.Name)
		}
	})
	if len(others) > 0 {
		return fmt.Errorf("--partitions is given on its own, not with %s: run sq topic alter %s --partitions %d, then sq topic alter %s with the settings",
			strings.Join(others, ", "), name, total, name)
	}
	if total < 1 || total > math.MaxInt32 {
		// The server bounds the count further (10000 by default) and
		// names its bound.
		return fmt.Errorf("--partitions %d: give the topic's new partition count in all, more than it has (as kafka-topics --alter --partitions; e.g. sq topic alter %s --partitions 6)",
			total, name)
	}
	a, err := g.admin(cmd)
	if err != nil {
		return err
	}
	defer a.Close()
	info, err := a.CreatePartitions(cmd.Context(), name, uint32(total))
	if err != nil {
		return controlError(g.controlAddr(cmd), err)
	}
	fmt.Fprintf(g.stdout, "topic %s now has %d partition%s\n\n", info.Name, info.Partitions, plural(int(info.Partitions)))
	return printTopicDescription(g.stdout, topicView{TopicInfo: info})
}

func newTopicAlterCommand(g *globals) *cobra.Command {
	var f topicAlterFlags
	cmd := &cobra.Command{
		Use:   "alter NAME",
		Short: "Change a topic's config or add partitions (control plane)",
		Long: "Change the config of the topic NAME: only the flags given change, the others\n" +
			"keep their value. Runs over the gRPC control plane (--control). The settings a\n" +
			"live topic can change are " + alterableSettings + ";\n" +
			"--segment-bytes is fixed when the topic is created (sq topic create).\n\n" +
			"--partitions N grows the topic to N partitions in all (the new total, as\n" +
			"kafka-topics --alter --partitions; rpk topic add-partitions counts the ones\n" +
			"added). Partitions can be added, never removed; existing partitions keep their\n" +
			"records and committed offsets. Keyed records map to partitions by the partition\n" +
			"count, so a key's new records may go to another partition than its old ones.\n" +
			"Producers and consumers see the new partitions at their next metadata refresh,\n" +
			"consumer groups at their next heartbeat. --partitions is given on its own.",
		Example: "  sq topic alter orders --retention-ms 86400000\n" +
			"  sq topic alter audit --sync-policy every-batch --retention-bytes -1\n" +
			"  sq topic alter orders --partitions 6\n" +
			"  sq topic alter payments --min-insync-replicas 2 --unclean-leader-election=false\n" +
			"  sq topic alter orders --local-retention-ms 3600000 --local-retention-bytes -2",
		Args: oneTopicName,
		RunE: func(cmd *cobra.Command, args []string) error {
			ch := sdk.TopicConfigChange{}
			fl := cmd.Flags()
			if fl.Changed("partitions") {
				return runTopicAddPartitions(cmd, g, args[0], f.partitions)
			}
			if fl.Changed("sync-policy") {
				ch.SyncPolicy = &f.syncPolicy
			}
			if fl.Changed("retention-ms") {
				ch.RetentionMs = &f.retentionMs
			}
			if fl.Changed("retention-bytes") {
				ch.RetentionBytes = &f.retentionBytes
			}
			if fl.Changed("segment-ms") {
				ch.SegmentMs = &f.segmentMs
			}
			if fl.Changed("max-record-bytes") {
				ch.MaxRecordBytes = &f.maxRecordBytes
			}
			if fl.Changed("min-insync-replicas") {
				if f.minInsync < 1 {
					return fmt.Errorf("--min-insync-replicas %d: want 1 to the topic's replication factor", f.minInsync)
				}
				ch.MinInsyncReplicas = &f.minInsync
			}
			if fl.Changed("unclean-leader-election") {
				ch.UncleanLeaderElection = &f.unclean
			}
			if err := checkLocalRetentionFlags(f.localRetentionMs, f.localRetentionBytes); err != nil {
				return err
			}
			if fl.Changed("local-retention-ms") {
				ch.LocalRetentionMs = &f.localRetentionMs
			}
			if fl.Changed("local-retention-bytes") {
				ch.LocalRetentionBytes = &f.localRetentionBytes
			}
			if ch == (sdk.TopicConfigChange{}) {
				return errors.New("nothing to change: give at least one of " + alterableSettings + ", or --partitions N to grow the topic to N partitions")
			}
			a, err := g.admin(cmd)
			if err != nil {
				return err
			}
			defer a.Close()
			info, err := a.AlterTopicConfig(cmd.Context(), args[0], ch)
			if err != nil {
				return controlError(g.controlAddr(cmd), err)
			}
			return printTopicDescription(g.stdout, topicView{TopicInfo: info})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.syncPolicy, "sync-policy", "", "every-batch, none, or an fsync interval in ms (N or Nms)")
	fl.Int64Var(&f.retentionMs, "retention-ms", 0, "keep records this many milliseconds (-1: forever)")
	fl.Int64Var(&f.retentionBytes, "retention-bytes", 0, "keep at most this many bytes per partition (-1: unlimited)")
	fl.Int64Var(&f.segmentMs, "segment-ms", 0, "roll the active segment after this many milliseconds")
	fl.Int32Var(&f.maxRecordBytes, "max-record-bytes", 0, "largest record (key+value+headers) in bytes")
	fl.Int32Var(&f.minInsync, "min-insync-replicas", 0, "in-sync replicas a publish with acks all needs (1 to the replication factor)")
	fl.BoolVar(&f.unclean, "unclean-leader-election", false, "when no in-sync replica is alive, let another replica lead (acknowledged records may be lost); =false turns it off")
	fl.Int64Var(&f.localRetentionMs, "local-retention-ms", 0, "with tiered storage, keep records on local disk this many milliseconds, at most retention.ms (-2: the same as retention.ms; -1: unlimited, only with unlimited retention.ms)")
	fl.Int64Var(&f.localRetentionBytes, "local-retention-bytes", 0, "with tiered storage, keep at most this many bytes per partition on local disk, at most retention.bytes (-2: the same as retention.bytes; -1: unlimited, only with unlimited retention.bytes)")
	fl.Int64Var(&f.partitions, "partitions", 0, "grow the topic to this many partitions in all (more than it has; given alone)")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		err = flagError(cmd, err)
		if strings.Contains(err.Error(), "--segment-bytes") {
			return fmt.Errorf("%w: segment.bytes is fixed when a topic is created; topic alter changes %s", err, alterableSettings)
		}
		if strings.Contains(err.Error(), "--partitions") {
			return fmt.Errorf("%w: --partitions N grows the topic to N partitions in all", err)
		}
		return fmt.Errorf("%w (topic alter changes %s, or the partition count with --partitions)", err, alterableSettings)
	})
	return cmd
}
