// Command runnel runs Runnel's bundled example jobs in an in-process mini-cluster and benchmarks the
// engine.
//
//	runnel examples                              list the examples
//	runnel run wordcount --input F --output O    run an example (see runnel run EXAMPLE --help)
//	runnel bench throughput [--json]             engine vs hand-written Go baseline
//	runnel bench checkpoints [--interval D]      throughput with checkpoints, as a ratio to without
//	runnel bench recovery                        one failure under full, region and approximate failover
//
// Every example takes the recovery flags of `runnel run`: checkpoints (--checkpoint-interval,
// --checkpoint-mode, --checkpoint-storage), --failover, --restart-strategy, --state-backend, and
// --inject-failure to make tasks fail on purpose, for example
//
//	runnel run sequence --records 200000 --checkpoint-interval 100ms --inject-failure 'map[0]@50000' --report r.json
//
// The --report JSON holds the engine's job result (vertices, subtasks and their attempts, checkpoints,
// failovers) and, for examples that report something of their own, their fields (the sequence example's
// "checker").
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries an exit code for errors that were already reported.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	root := newRoot()
	if err := root.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "runnel: %v\n", err)
		code := 1
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		}
		os.Exit(code)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "runnel",
		Short:         "Runnel: a distributed stream-processing engine in Go",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newExamplesCmd(), newRunCmd(), newBenchCmd())
	return root
}
