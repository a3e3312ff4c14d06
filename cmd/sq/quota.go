package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/seedqueue/sq/api/sqv1"
)

func newQuotaCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Set, list and remove client byte-rate quotas (control plane)",
		Long: "Client quotas bound the bytes per second a principal may publish (produce) and\n" +
			"read (fetch) on each node, as Kafka's client quotas do. A client over its quota\n" +
			"is slowed down, never refused: its responses carry a throttle time it must wait\n" +
			"before its next request. The default quota applies to every principal without\n" +
			"its own. Quotas are cluster metadata: set on any node, they apply on all.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newQuotaSetCommand(g), newQuotaListCommand(g), newQuotaRemoveCommand(g))
	return cmd
}

// quotaTarget is the entity flags of quota set and remove.
type quotaTarget struct {
	principal string
	def       bool
}

func (q *quotaTarget) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&q.principal, "principal", "", `the principal, "User:<name>" ("alice" means "User:alice"; a client certificate's subject under mutual TLS; "User:ANONYMOUS" for clients without credentials)`)
	cmd.Flags().BoolVar(&q.def, "default", false, "the default quota, for every principal without its own")
}

// check returns an error unless exactly one of --principal and --default
// is given.
func (q *quotaTarget) check() error {
	switch {
	case q.def && q.principal != "":
		return errors.New("--principal and --default name two quotas: give one")
	case !q.def && q.principal == "":
		return errors.New("name the quota: --principal P, or --default")
	}
	return nil
}

// name is how the target is written in messages.
func (q *quotaTarget) name() string {
	if q.def {
		return "the default"
	}
	return q.principal
}

func newQuotaSetCommand(g *globals) *cobra.Command {
	var target quotaTarget
	var produce, fetch int64
	cmd := &cobra.Command{
		Use:   "set",
		Short: "Set the produce and/or fetch byte rate of a principal or of the default",
		Long: "Set the bytes per second a principal (or, with --default, every principal\n" +
			"without its own quota) may publish and read on each node. A rate not given keeps\n" +
			"its value; remove a quota with 'sq quota remove'. Rates are whole positive\n" +
			"numbers of bytes per second.",
		Example: "  sq quota set --principal alice --produce-bytes-per-sec 1048576 --fetch-bytes-per-sec 2097152\n" +
			"  sq quota set --default --produce-bytes-per-sec 10485760",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := target.check(); err != nil {
				return err
			}
			pSet, fSet := cmd.Flags().Changed("produce-bytes-per-sec"), cmd.Flags().Changed("fetch-bytes-per-sec")
			switch {
			case !pSet && !fSet:
				return errors.New("give --produce-bytes-per-sec, --fetch-bytes-per-sec or both")
			case pSet && produce < 1:
				return fmt.Errorf("--produce-bytes-per-sec %d: want a whole number of bytes per second, 1 or more (remove a quota with 'sq quota remove')", produce)
			case fSet && fetch < 1:
				return fmt.Errorf("--fetch-bytes-per-sec %d: want a whole number of bytes per second, 1 or more (remove a quota with 'sq quota remove')", fetch)
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := call(cmd.Context(), c, "Quotas.SetQuota", sqv1.NewQuotasClient(c.conn).SetQuota, &sqv1.SetQuotaRequest{
				Principal: target.principal, DefaultEntity: target.def, ProduceBytesPerSec: produce, FetchBytesPerSec: fetch})
			if err != nil {
				return fmt.Errorf("cannot set the quota of %s: %w", target.name(), err)
			}
			fmt.Fprintf(g.stdout, "quota of %s: %s\n", quotaEntityName(r.GetQuota()), quotaRates(r.GetQuota()))
			return nil
		},
	}
	target.addFlags(cmd)
	cmd.Flags().Int64Var(&produce, "produce-bytes-per-sec", 0, "bytes per second of published records, per node")
	cmd.Flags().Int64Var(&fetch, "fetch-bytes-per-sec", 0, "bytes per second of read records, per node")
	return cmd
}

func newQuotaRemoveCommand(g *globals) *cobra.Command {
	var target quotaTarget
	cmd := &cobra.Command{
		Use:     "remove",
		Short:   "Remove every quota of a principal or the default",
		Long:    "Remove the produce and fetch quotas of a principal (the default then applies to\nit, if set) or, with --default, the default quota.",
		Example: "  sq quota remove --principal alice\n  sq quota remove --default",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := target.check(); err != nil {
				return err
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := call(cmd.Context(), c, "Quotas.RemoveQuota", sqv1.NewQuotasClient(c.conn).RemoveQuota,
				&sqv1.RemoveQuotaRequest{Principal: target.principal, DefaultEntity: target.def}); err != nil {
				return fmt.Errorf("cannot remove the quota of %s: %w", target.name(), err)
			}
			fmt.Fprintf(g.stdout, "removed the quota of %s\n", target.name())
			return nil
		},
	}
	target.addFlags(cmd)
	return cmd
}

func newQuotaListCommand(g *globals) *cobra.Command {
	var format *adminFormat
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List the quotas, the default first",
		Example: "  sq quota list\n  sq quota list -f json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := format.json()
			if err != nil {
				return err
			}
			c, err := g.controlConn(cmd)
			if err != nil {
				return err
			}
			defer c.Close()
			r, err := call(cmd.Context(), c, "Quotas.ListQuotas", sqv1.NewQuotasClient(c.conn).ListQuotas, &sqv1.ListQuotasRequest{})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, quotasJSON(r.GetQuotas()))
			}
			return printQuotas(g.stdout, r.GetQuotas())
		},
	}
	format = addAdminFormatFlag(cmd)
	return cmd
}

// quotaEntityName is "<default>" or the entry's principal.
func quotaEntityName(q *sqv1.QuotaEntry) string {
	if q.GetDefaultEntity() {
		return "<default>"
	}
	return q.GetPrincipal()
}

// quotaRate writes a rate, "-" for none.
func quotaRate(n int64) string {
	if n <= 0 {
		return "-"
	}
	return fmt.Sprintf("%d B/s", n)
}

func quotaRates(q *sqv1.QuotaEntry) string {
	return fmt.Sprintf("produce %s, fetch %s", quotaRate(q.GetProduceBytesPerSec()), quotaRate(q.GetFetchBytesPerSec()))
}

func printQuotas(out io.Writer, qs []*sqv1.QuotaEntry) error {
	if len(qs) == 0 {
		_, err := fmt.Fprintln(out, "no quotas")
		return err
	}
	w := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(w, "PRINCIPAL\tPRODUCE\tFETCH")
	for _, q := range qs {
		fmt.Fprintf(w, "%s\t%s\t%s\n", quotaEntityName(q), quotaRate(q.GetProduceBytesPerSec()), quotaRate(q.GetFetchBytesPerSec()))
	}
	return w.Flush()
}

// quotaJSON is one quota of 'sq quota list -f json' (README.md).
type quotaJSON struct {
	Principal          string `json:"principal"`
	Default            bool   `json:"default"`
	ProduceBytesPerSec int64  `json:"produce_bytes_per_sec"`
	FetchBytesPerSec   int64  `json:"fetch_bytes_per_sec"`
}

// quotasJSON is the document of 'sq quota list -f json': {"quotas": [...]}.
func quotasJSON(qs []*sqv1.QuotaEntry) map[string][]quotaJSON {
	out := make([]quotaJSON, 0, len(qs))
	for _, q := range qs {
		out = append(out, quotaJSON{Principal: q.GetPrincipal(), Default: q.GetDefaultEntity(),
			ProduceBytesPerSec: q.GetProduceBytesPerSec(), FetchBytesPerSec: q.GetFetchBytesPerSec()})
	}
	return map[string][]quotaJSON{"quotas": out}
}
