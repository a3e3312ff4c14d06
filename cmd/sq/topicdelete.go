package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newTopicDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a topic and all its records",
		Long: "Delete the topic NAME and all its records. The name can be reused at once;\n" +
			"consumers still reading the topic get UNKNOWN_TOPIC, and its files are removed\n" +
			"from the server's disk once the last read in progress is done.",
		Example: "  sq topic delete orders",
		Args:    oneTopicName,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.DeleteTopic(cmd.Context(), args[0]); err != nil {
				return apiError(g.addr(cmd), err)
			}
			fmt.Fprintf(g.stdout, "deleted topic %s\n", args[0])
			return nil
		},
	}
}
