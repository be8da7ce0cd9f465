package roles

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-dev/runnel/internal/buildinfo"
	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/rpc"
)

// SubmitConfig configures Submit.
type SubmitConfig struct {
	// JobManager is the JobManager's address (HOST:PORT); with HA, the leader's, found through etcd.
	JobManager string
	HA         *ha.Config
	TLS        *TLSFiles
	// Job is this process's build of a job registered in the binary, built with Job.Args on every
	// process: its progress callback is fed from the JobManager, and at the end the accumulators the
	// cluster's tasks built are merged into its own.
	Job *executor.Job
}

// ErrJobManagerLost is returned by Submit when the connection to the JobManager was lost while the job
// ran: its state is unknown.
var ErrJobManagerLost = errors.New("lost the JobManager; the job's state is unknown")

// ErrJobManagerUnreachable is returned by Submit and Cancel when the JobManager does not answer.
var ErrJobManagerUnreachable = rpc.ErrUnreachable

// Submit runs a registered job on the cluster of a JobManager and blocks until it ends, as
// executor.Execute does in this process: the result is returned in every case where the job ran, and err
// is non-nil unless it finished or was cancelled. Cancelling ctx stops the job (with its savepoint on stop, if it has one).
func Submit(ctx context.Context, cfg SubmitConfig) (*report.JobResult, error) {
	job, name := cfg.Job, cfg.Job.Name
	if err := job.CheckSharedStorage(); err != nil {
		return nil, err
	}
	if cfg.HA != nil {
		var err error
		if cfg.JobManager, err = leaderAddress(ctx, *cfg.HA); err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
	}
	conn, creds, err := dialJobManager(cfg.JobManager, cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	defer conn.Close()
	client := rpc.NewJobClient(conn)
	build, err := buildinfo.Current()
	if err != nil {
		return nil, fmt.Errorf("submit: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	id, err := client.Submit(sctx, rpc.SubmitRequest{Name: name, Args: job.Args, Graph: job.Fingerprint, Build: build})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("submit job %q to %s: %w", name, cfg.JobManager, creds.Explain(err))
	}
	// The watch outlives ctx: a cancelled ctx stops the job, and its end still comes through the watch.
	var current atomic.Pointer[rpc.JobClient]
	current.Store(client)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = current.Load().Stop(sctx, id, "")
			cancel()
		case <-stopped:
		}
	}()
	defer close(stopped)
	var final *rpc.JobStatus
	watch := func(client *rpc.JobClient) error {
		return client.Watch(context.Background(), id, func(st rpc.JobStatus) error {
			if st.Final {
				final = &st
				return nil
			}
			if progress := job.Settings.Progress; progress != nil {
				var r report.JobResult
				if err := json.Unmarshal(st.ResultJSON, &r); err == nil {
					progress(&r)
				}
			}
			return nil
		})
	}
	werr := watch(client)
	if final == nil && cfg.HA != nil {
		// The leader was lost: the next one resumes the job under the same id. Follow it there.
		werr = followLeader(ctx, cfg, id, &current, watch, func() bool { return final != nil })
	}
	if final == nil {
		if werr == nil {
			werr = errors.New("the watch ended before the job")
		}
		return nil, fmt.Errorf("job %q (%s) on %s: %w: %w", name, id, cfg.JobManager, ErrJobManagerLost, werr)
	}
	var res report.JobResult
	if err := json.Unmarshal(final.ResultJSON, &res); err != nil {
		return nil, fmt.Errorf("job %q (%s): the JobManager's result: %w", name, id, err)
	}
	if err := job.MergeAccumulators(final.Accumulators); err != nil {
		return &res, fmt.Errorf("job %q: accumulators: %w", name, err)
	}
	if job.Settings.Progress != nil {
		job.Settings.Progress(&res)
	}
	if final.Error != "" {
		return &res, fmt.Errorf("%s (job id %s)", final.Error, id)
	}
	return &res, nil
}

// CancelConfig configures Cancel.
type CancelConfig struct {
	// JobManager is the JobManager's address (HOST:PORT); with HA, the leader's, found through etcd.
	JobManager string
	HA         *ha.Config
	TLS        *TLSFiles
	// Job is the job's id, as the REST API and the JobManager's log show it.
	Job string
	// Savepoint, when set, is a directory every process reaches where a savepoint is written first.
	Savepoint string
}

// Cancel stops a job that runs on the cluster of a JobManager: with a savepoint first when asked, else at
// once. It returns when the JobManager took the request; the job's own client sees it end.
func Cancel(ctx context.Context, cfg CancelConfig) error {
	id, err := protocol.ParseJobID(cfg.Job)
	if err != nil {
		return fmt.Errorf("cancel %q: %w", cfg.Job, err)
	}
	if cfg.HA != nil {
		if cfg.JobManager, err = leaderAddress(ctx, *cfg.HA); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
	}
	conn, creds, err := dialJobManager(cfg.JobManager, cfg.TLS)
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := rpc.NewJobClient(conn).Stop(ctx, id, cfg.Savepoint); err != nil {
		return fmt.Errorf("cancel job %s on %s: %w", cfg.Job, cfg.JobManager, creds.Explain(err))
	}
	return nil
}

// dialJobManager makes the client connection to a JobManager's job service, over mutual TLS when files
// are given, with the credentials that explain a call's failure by a failed TLS handshake (nil without
// TLS). gRPC connects lazily: an unreachable JobManager shows in the first call.
func dialJobManager(addr string, files *TLSFiles) (*grpc.ClientConn, *rpc.ClientCredentials, error) {
	_, clientTLS, err := files.load()
	if err != nil {
		return nil, nil, err
	}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	var tlsCreds *rpc.ClientCredentials
	if clientTLS != nil {
		tlsCreds = rpc.NewClientCredentials(clientTLS, "the JobManager")
		creds = tlsCreds
	}
	conn, err := grpc.NewClient(addr, append(rpc.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, nil, fmt.Errorf("JobManager %s: %w", addr, err)
	}
	return conn, tlsCreds, nil
}

// leaderAddress asks etcd which JobManager of the cluster hc names leads, and returns its address. An
// unreachable etcd, or no leader, wraps ErrJobManagerUnreachable: the cluster is not there, which is not a
// mistake in the command line.
func leaderAddress(ctx context.Context, hc ha.Config) (string, error) {
	c, err := ha.Open(ctx, hc)
	if errors.Is(err, ha.ErrUnreachable) {
		return "", fmt.Errorf("%w: %w", ErrJobManagerUnreachable, err)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	info, err := c.Leader(lctx)
	if err != nil {
		return "", fmt.Errorf("%w: cluster %q: %w", ErrJobManagerUnreachable, hc.Cluster, err)
	}
	return info.Addr, nil
}

// followWait bounds how long a client follows a job across a change of leader: the lease, the new
// leader's resume, and a restart from the checkpoint.
const followWait = 2 * time.Minute

// followLeader watches job id on whichever JobManager leads the cluster of cfg.HA, again each time the
// watch ends before the job did, until done says the job's end came or followWait passed without a watch
// that got anywhere. current is kept the client in use (for a stop).
func followLeader(ctx context.Context, cfg SubmitConfig, id protocol.JobID, current *atomic.Pointer[rpc.JobClient],
	watch func(*rpc.JobClient) error, done func() bool) error {
	deadline := time.Now().Add(followWait)
	var last error
	for !done() && time.Now().Before(deadline) {
		addr, err := leaderAddress(context.WithoutCancel(ctx), *cfg.HA)
		if err == nil {
			var conn *grpc.ClientConn
			if conn, _, err = dialJobManager(addr, cfg.TLS); err == nil {
				client := rpc.NewJobClient(conn)
				current.Store(client)
				began := time.Now()
				err = watch(client)
				conn.Close()
				if time.Since(began) > 5*time.Second {
					deadline = time.Now().Add(followWait) // it got somewhere: the wait starts again
				}
			}
		}
		if err != nil {
			last = err
		}
		if !done() {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return last
}
