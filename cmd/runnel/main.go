// Command runnel runs Runnel's bundled example jobs, in an in-process mini-cluster or on a cluster of
// JobManager and TaskManager processes, and benchmarks the engine. It is runnel.Main with the examples
// registered as jobs and two commands of its own (examples, bench), so its command line is the one a
// user's own job binary has:
//
//	runnel examples                              list the examples
//	runnel run wordcount --input F --output O    run an example (runnel run EXAMPLE --help: its flags)
//	runnel bench throughput [--json]             engine vs hand-written Go baseline
//	runnel bench checkpoints [--interval D]      throughput with checkpoints, as a ratio to without
//	runnel bench recovery                        one failure under full, region and approximate failover
//	runnel bench tm-loss [--freeze]              SIGKILL (SIGSTOP) a TaskManager process: detection and restart
//	runnel bench throughput --processes 3        the pipeline on 3 TaskManager processes / the mini-cluster
//	runnel bench nexmark --query q5              a Nexmark query over the generated events
//	runnel bench kafka [--bootstrap HOST:PORT]   Kafka to Kafka, exactly once against at least once
//
// A cluster of processes, every one started from this binary (see README, "Run a cluster"):
//
//	runnel jobmanager [--addr 127.0.0.1:6123] [--rest-addr 127.0.0.1:8081]
//	runnel taskmanager --jobmanager HOST:PORT --slots N
//	runnel submit EXAMPLE --jobmanager HOST:PORT [the flags of runnel run EXAMPLE]
//	runnel cancel JOBID --jobmanager HOST:PORT [--savepoint DIR]
//
// Every example takes the flags of every run: checkpoints (--checkpoint-interval, --checkpoint-mode,
// --checkpoint-storage), --failover, --restart-strategy, --state-backend, and --inject-failure to make
// tasks fail on purpose, for example
//
//	runnel run sequence --records 200000 --checkpoint-interval 100ms --inject-failure 'map[0]@50000' --report r.json
//
// The --report JSON holds the engine's job result (vertices, subtasks and their attempts, checkpoints,
// failovers) and, for examples that report something of their own, their fields (the sequence example's
// "checker").
//
// Exit codes: 0 success (a job FINISHED, or ran for its --duration); 1 the job FAILED, or another error
// while running; 2 a usage error: a command line that does not parse (unknown command or flag, a flag
// value of the wrong type, stray arguments) or that does not validate (a value out of range, a path that
// cannot be used, a configuration the engine refuses), found before any job runs; 130 stopped by SIGINT
// (Ctrl-C) and 143 stopped by SIGTERM, after the job was cancelled cleanly.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples"
	"github.com/runnel-dev/runnel/internal/cli"
)

// exitError carries an exit code for errors that were already reported.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit codes; see the package doc.
const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError marks err as a mistake in the command line.
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

func main() {
	registerExamples()
	cli.AddCommand(cli.Command{Name: "examples", Short: "list the bundled example jobs", Run: listExamples})
	cli.AddCommand(cli.Command{Name: "bench", Short: "benchmarks of the engine (runnel bench --help)",
		Run: func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			return runCobra(ctx, newBenchCmd(), args, stdout, stderr)
		}})
	runnel.Main()
}

// listExamples lists the bundled examples with their descriptions.
func listExamples(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "runnel examples: unexpected arguments %q\n", args)
		return exitUsage
	}
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, e := range examples.All() {
		fmt.Fprintf(w, "%s\t%s\n", e.Name, e.Description)
	}
	fmt.Fprintln(w, "\nRun one with: runnel run EXAMPLE [flags]   (runnel run EXAMPLE --help for its flags)")
	w.Flush()
	return 0
}

// runCobra executes a cobra command tree on args and returns the exit code, having reported an error on
// stderr.
func runCobra(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	root.SilenceUsage, root.SilenceErrors = true, true
	withExitCodes(root)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "runnel %s: %v\n", root.Name(), err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Every error of a command's RunE carries its code (see withExitCodes); one without a code comes from
	// cobra itself, which found the command line unusable before running anything.
	return exitUsage
}

// withExitCodes makes every error a command's RunE returns carry an exit code: the code it chose
// (usageError, or an *exitError of its own), or exitFailed. So exitUsage is left to what cobra rejects
// before a RunE runs, and to what a RunE marks as a usage error.
func withExitCodes(c *cobra.Command) {
	if runE := c.RunE; runE != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			err := runE(cmd, args)
			var ee *exitError
			if err != nil && !errors.As(err, &ee) {
				err = &exitError{code: exitFailed, err: err}
			}
			return err
		}
	}
	for _, sub := range c.Commands() {
		withExitCodes(sub)
	}
}
