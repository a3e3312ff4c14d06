package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newTopicRestoreCommand is `sq topic restore NAME`: the server serves the
// topic's history from its tiered storage bucket (docs/tiering.md).
func newTopicRestoreCommand(g *globals) *cobra.Command {
	var topicID string
	cmd := &cobra.Command{
		Use:   "restore NAME",
		Short: "Serve a topic's history from the tiered storage bucket on a server without it",
		Long: "Ask the server (started with --s3-bucket, not part of a cluster, without the\n" +
			"topic) to serve the topic NAME from the bucket: it lists the bucket's manifests\n" +
			"of NAME, creates the topic with the same id and partitions, each partition's\n" +
			"local log starting where its remote log ends, and reads below that come from\n" +
			"the bucket. The restored topic keeps records forever (retention.ms and\n" +
			"retention.bytes -1) until sq topic alter says otherwise. Goes over the gRPC\n" +
			"control plane (--control).",
		Example: "  sq topic restore orders\n  sq topic restore orders --topic-id 6f1c2e0a-93b4-4d5e-8a7f-0b1c2d3e4f50",
		Args:    oneTopicName,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			info, err := c.admin.RestoreTopic(cmd.Context(), args[0], topicID)
			if err != nil {
				return c.callError("RestoreTopic", err)
			}
			fmt.Fprintf(g.stdout, "restored topic %s (id %s) with %d partition%s from the bucket\n", info.Name, info.ID, info.Partitions, plural(int(info.Partitions)))
			for _, p := range info.PartitionInfos {
				fmt.Fprintf(g.stdout, "  partition %d: history up to offset %d in the bucket; new records from %d\n", p.Partition, p.LogEndOffset, p.LogEndOffset)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&topicID, "topic-id", "", "the id (UUID) of the topic to restore when the bucket holds several of that name")
	return cmd
}
