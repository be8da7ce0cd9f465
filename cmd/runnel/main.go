// Command runnel runs Runnel's bundled example jobs, in an in-process mini-cluster or on a cluster of
// JobManager and TaskManager processes, and benchmarks the engine.
//
//	runnel examples                              list the examples
//	runnel run wordcount --input F --output O    run an example (see runnel run EXAMPLE --help)
//	runnel bench throughput [--json]             engine vs hand-written Go baseline
//	runnel bench checkpoints [--interval D]      throughput with checkpoints, as a ratio to without
//	runnel bench recovery                        one failure under full, region and approximate failover
//	runnel bench tm-loss [--freeze]              SIGKILL (SIGSTOP) a TaskManager process: detection and restart
//	runnel bench throughput --processes 3        the pipeline on 3 TaskManager processes / the mini-cluster
//
// A cluster of processes, every one started from this binary (see README, "Run a cluster"):
//
//	runnel jobmanager [--addr 127.0.0.1:6123] [--rest-addr 127.0.0.1:8081]
//	runnel taskmanager --jobmanager HOST:PORT --slots N
//	runnel submit EXAMPLE --jobmanager HOST:PORT [the flags of runnel run EXAMPLE]
//	runnel cancel JOBID --jobmanager HOST:PORT [--savepoint DIR]
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
//
// Exit codes: 0 success (a job FINISHED, or ran for its --duration); 1 the job FAILED, or another error
// while running; 2 a usage error: a command line that does not parse (unknown command or flag, a flag
// value of the wrong type, stray arguments) or that does not validate (a value out of range, a path that
// cannot be used, a configuration the engine refuses), found before any job runs; 130 stopped by SIGINT
// (Ctrl-C) and 143 stopped by SIGTERM, after the job was cancelled cleanly.
package main

import (
	"errors"
	"fmt"
	"io"
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

// Exit codes; see the package doc.
const (
	exitFailed = 1
	exitUsage  = 2
)

// usageError marks err as a mistake in the command line.
func usageError(err error) error { return &exitError{code: exitUsage, err: err} }

func main() {
	registerExamples()
	os.Exit(runCommand(newRoot(), os.Args[1:], os.Stderr))
}

// runCommand executes the command line args and returns the exit code, having reported an error on stderr.
func runCommand(root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "runnel: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Every error of a command's RunE carries its code (see withExitCodes); one without a code comes from
	// cobra itself, which found the command line unusable before running anything.
	return exitUsage
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "runnel",
		Short:         "Runnel: a distributed stream-processing engine in Go",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newExamplesCmd(), newRunCmd(), newBenchCmd(), newSubmitCmd(), newJobManagerCmd(), newTaskManagerCmd(), newCancelCmd())
	withExitCodes(root)
	return root
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
