package runnel

import (
	"context"
	"errors"

	"github.com/runnel-dev/runnel/internal/cli"
	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/roles"
)

// Defaults of a cluster's processes.
const (
	DefaultJobManagerAddr    = roles.DefaultJobManagerAddr
	DefaultRESTAddr          = roles.DefaultRESTAddr
	DefaultHeartbeatInterval = roles.DefaultHeartbeatInterval
	DefaultHeartbeatTimeout  = roles.DefaultHeartbeatTimeout
)

// JobManagerConfig configures ServeJobManager: its addresses, heartbeats, slot wait, buffer size, TLS and
// logger.
type JobManagerConfig = roles.JobManagerConfig

// TaskManagerConfig configures ServeTaskManager: its JobManager, name, slots, data address, memory, metrics
// address, TLS and logger.
type TaskManagerConfig = roles.TaskManagerConfig

// TLSFiles names the PEM files of a process's mutual TLS: its certificate and key, and the certificate
// authority that every peer's certificate must be signed by. ServerName, when set, is the name every
// peer's certificate is verified against instead of the host dialled (one certificate for a cluster).
type TLSFiles = roles.TLSFiles

// CancelConfig configures Cancel: the JobManager, TLS, the job's id and an optional savepoint directory.
type CancelConfig = roles.CancelConfig

// ErrJobManagerLost is returned by Submit when the connection to the JobManager was lost while the job
// ran: its state is unknown.
var ErrJobManagerLost = roles.ErrJobManagerLost

// ErrJobManagerUnreachable is returned by Submit and Cancel when the JobManager does not answer.
var ErrJobManagerUnreachable = roles.ErrJobManagerUnreachable

// ServeJobManager runs a JobManager until ctx is done: it registers TaskManagers, runs the jobs clients
// submit (each a job registered in this binary, see Register) on their slots, and serves the REST API.
// When ctx is done it cancels the jobs that still run, waits for them, and returns.
func ServeJobManager(ctx context.Context, cfg JobManagerConfig) error {
	return roles.ServeJobManager(ctx, cli.RegisteredJobs{}, cfg)
}

// ServeTaskManager runs a TaskManager until ctx is done: it registers with the JobManager, runs the tasks
// it is given (the jobs are built from this binary's registry, see Register), and when it loses the
// JobManager it cancels every task and registers again, backing off from 100 ms to 5 s. A JobManager that
// refuses it for good (another build) ends it with that error.
func ServeTaskManager(ctx context.Context, cfg TaskManagerConfig) error {
	return roles.ServeTaskManager(ctx, cli.RegisteredJobs{}, cfg)
}

// SubmitConfig configures Submit.
type SubmitConfig struct {
	// JobManager is the JobManager's address (HOST:PORT).
	JobManager string
	TLS        *TLSFiles
	// Job names a job registered in this binary (see Register), built with Args on every process.
	Job  string
	Args []string
	// Env is this process's build of the job (nil: Submit builds it from Args): it is checked as Execute
	// would, its progress callback is fed from the JobManager, and at the end the accumulators the
	// cluster's tasks built are merged into its own, so that the caller reads them as after Execute.
	Env *Environment
}

// Submit runs a registered job on the cluster of a JobManager and blocks until it ends, like Execute: the
// result is returned in every case where the job ran, and err is non-nil unless it finished or was
// cancelled. Cancelling ctx stops the job (with its savepoint on stop, if it has one).
func Submit(ctx context.Context, cfg SubmitConfig) (*JobResult, error) {
	var job *executor.Job
	var err error
	if env := cfg.Env; env == nil {
		job, err = buildRegistered(ctx, cfg.Job, cfg.Args)
	} else if env.executed {
		err = errors.New("Submit: an Environment runs one job; make a new Environment for another")
	} else {
		env.executed = true
		job, err = env.compile(ctx, cfg.Job)
	}
	if err != nil {
		return nil, err
	}
	job.Args = cfg.Args
	return roles.Submit(ctx, roles.SubmitConfig{JobManager: cfg.JobManager, TLS: cfg.TLS, Job: job})
}

// Cancel stops a job that runs on the cluster of a JobManager: with a savepoint first when asked, else at
// once. It returns when the JobManager took the request; the job's own client sees it end.
func Cancel(ctx context.Context, cfg CancelConfig) error { return roles.Cancel(ctx, cfg) }
