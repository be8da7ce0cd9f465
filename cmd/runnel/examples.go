package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/runnel-dev/runnel/examples"
)

func newExamplesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "examples",
		Short: "List the bundled example jobs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for _, e := range examples.All() {
				fmt.Fprintf(w, "%s\t%s\n", e.Name, e.Description)
			}
			fmt.Fprintln(w, "\nRun one with: runnel run EXAMPLE [flags]   (runnel run EXAMPLE --help for its flags)")
			return w.Flush()
		},
	}
}
