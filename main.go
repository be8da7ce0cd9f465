package runnel

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnel-dev/runnel/internal/cli"
)

// Main runs the role its program's command line names, with the jobs registered in the binary (see
// Register), and exits:
//
//	prog [run] [JOB] [ARGS...]                                  run JOB in the embedded mini-cluster
//	prog jobmanager [--addr HOST:PORT] [--rest-addr HOST:PORT]  run a JobManager
//	prog taskmanager --jobmanager HOST:PORT [--slots N]         run a TaskManager
//	prog submit [JOB] --jobmanager HOST:PORT [--report FILE] [-- ARGS...]
//	                                                             run JOB on the cluster and wait for its end
//
// prog --help (or -h, help, run --help) prints the roles and the registered jobs. JOB may be left out when
// one job is registered; ARGS are what its build function gets, the same on every process. Every process
// of a cluster must run the same binary. SIGINT or SIGTERM stops a job (run, submit) or a daemon. Exit
// codes: 0 the job finished or a daemon stopped; 1 the job failed or was stopped; 2 a mistake in the
// command line or configuration, found before anything ran.
func Main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, registryJobs{}, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
