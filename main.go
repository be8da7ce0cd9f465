package runnel

import (
	"context"
	"os"

	"github.com/runnel-dev/runnel/internal/cli"
)

// Main runs what its program's command line asks for, with the jobs registered in the binary (Register,
// RegisterJob), and exits. The bundled runnel command is such a program, so a user's binary has its
// command line:
//
//	prog run [JOB] [FLAGS] [-- JOB-ARGS]                      run JOB in this process (an embedded cluster)
//	prog submit [JOB] --jobmanager HOST:PORT [FLAGS] [-- JOB-ARGS]
//	                                                          run JOB on a cluster and follow it to its end
//	prog cancel JOBID --jobmanager HOST:PORT [--savepoint DIR] stop a job that runs on a cluster
//	prog jobmanager [FLAGS]                                   run a JobManager
//	prog taskmanager --jobmanager HOST:PORT [FLAGS]           run a TaskManager
//	prog JOB [FLAGS] [-- JOB-ARGS]                            the same as run JOB
//
// FLAGS are the job's own (RegisterJob) and those of every run: parallelism, checkpoints, failover and
// restart strategy, state backend, savepoints, failure injection, --report, --metrics-addr, --duration
// and how progress is shown. JOB may be left out when one job is registered; JOB-ARGS, and the words that
// are not flags, go to the job's Build. prog alone or with --help lists the roles, the jobs with their
// descriptions, and the flags; prog run JOB --help shows the job's flags with its defaults. Every process
// of a cluster must run the same binary.
//
// SIGINT or SIGTERM stops a job cleanly (a second one ends the process) or a daemon. Exit codes: 0 the
// job finished or ran for its --duration, or a daemon stopped; 1 the job failed or was cancelled, or an
// error while running; 2 a mistake in the command line or configuration, found before anything ran; 130
// and 143 the job was stopped by SIGINT and SIGTERM.
func Main() {
	os.Exit(cli.Main(context.Background(), cliSettings(NewEnvironment().cfg), os.Args[1:], os.Stdout, os.Stderr))
}
