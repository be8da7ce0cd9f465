package roles

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-dev/runnel/internal/buildinfo"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/metrics"
	"github.com/runnel-dev/runnel/internal/mtls"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc"
)

// DefaultGrace is how long a TaskManager with HA keeps its tasks running without a leader by default: long
// enough for the leader's lease to expire (5 s by default), a standby to win and take the tasks over.
const DefaultGrace = 30 * time.Second

// TaskManagerConfig configures ServeTaskManager.
type TaskManagerConfig struct {
	// JobManager is the JobManager's address (HOST:PORT).
	JobManager string
	// HA, when set, replaces JobManager: the TaskManager registers with the JobManager that leads the
	// cluster on etcd, found again each time it registers.
	HA *ha.Config
	// Name identifies the TaskManager in reports and logs (default "tm-" and the process id).
	Name string
	// Slots is the number of task slots (default 1).
	Slots int
	// DataAddr is where its data server listens (default 127.0.0.1:0); DataAdvertise, when set, is the
	// address other TaskManagers are told to reach it at.
	DataAddr, DataAdvertise string
	// NetworkMemoryBytes and BufferSize size its network buffers (zero: the defaults).
	NetworkMemoryBytes int64
	// InflightLogMemory is the memory of task failover's in-flight logs (zero: 1 GiB).
	InflightLogMemory int64
	// InflightLogDisk is their disk past that memory (zero: 4 GiB; negative: none).
	InflightLogDisk int64
	BufferSize      int
	// Grace, with HA, is how long the TaskManager keeps its tasks running after it lost the leader, for the
	// next leader to take them over (task continuity); it runs again from each moment etcd could not be
	// reached (no leader can be elected then). Zero: the tasks are cancelled when the leader is lost.
	Grace time.Duration
	// JobManagerWait, when set, makes the TaskManager exit with an error after it has been without a
	// JobManager this long; without it, it keeps trying to register (a daemon).
	JobManagerWait time.Duration
	// MetricsAddr, when set, is where the TaskManager serves its Prometheus metrics at /metrics (its
	// in-flight logs' gauges, runnel_inflight_log_*, and the Go runtime's), over TLS with TLS.
	MetricsAddr string
	// TLS, when set, requires mutual TLS on every connection.
	TLS    *TLSFiles
	Logger *slog.Logger
	// Registered, when set, is called each time the TaskManager registered with the JobManager.
	Registered func()
	// MetricsListening, when set, is called with the metrics server's address once it listens.
	MetricsListening func(addr string)
}

// ServeTaskManager runs a TaskManager until ctx is done: it registers with the JobManager, runs the tasks
// it is given (the jobs are built from this binary's registry, see Register), and when it loses the
// JobManager it cancels every task and registers again, backing off from 100 ms to 5 s. A JobManager that
// refuses it for good (another build) ends it with that error.
func ServeTaskManager(ctx context.Context, jobs Jobs, cfg TaskManagerConfig) (err error) {
	lg := cmp.Or(cfg.Logger, slog.Default())
	if cfg.JobManager == "" && cfg.HA == nil {
		return errors.New("taskmanager: --jobmanager HOST:PORT (or --ha) is required")
	}
	var hac *ha.Client
	if cfg.HA != nil {
		if hac, err = ha.Open(ctx, *cfg.HA); err != nil {
			return fmt.Errorf("taskmanager: %w", err)
		}
		defer hac.Close()
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("tm-%d", os.Getpid())
	}
	if cfg.Slots == 0 {
		cfg.Slots = 1
	}
	serverTLS, clientTLS, err := cfg.TLS.load()
	if err != nil {
		return fmt.Errorf("taskmanager: %w", err)
	}
	build, err := buildinfo.Current()
	if err != nil {
		return fmt.Errorf("taskmanager: %w", err)
	}
	tc := cluster.TaskManagerConfig{Name: cfg.Name, Slots: cfg.Slots, NetworkMemoryBytes: cfg.NetworkMemoryBytes, InflightLogMemory: cfg.InflightLogMemory,
		InflightLogDisk: cfg.InflightLogDisk,
		BufferSize:      cfg.BufferSize, DataAddress: cfg.DataAddr, DataAdvertise: cfg.DataAdvertise, Build: build, Logger: lg,
		Registered: cfg.Registered, KeepTasks: cfg.HA != nil && cfg.Grace > 0}
	tc.DataServer.TLS, tc.DataDial.TLS = serverTLS, clientTLS
	tm, err := cluster.NewTaskManager(tc)
	if err != nil {
		return fmt.Errorf("taskmanager: %w", err)
	}
	defer tm.Shutdown()
	metricsAddr := ""
	if cfg.MetricsAddr != "" {
		ln, lerr := net.Listen("tcp", cfg.MetricsAddr)
		if lerr != nil {
			return fmt.Errorf("taskmanager: metrics: %w", lerr)
		}
		metricsAddr = ln.Addr().String()
		ms := metrics.ServeTaskManager(ln, tm, serverTLS, mtls.NewRefusalLog(lg, "metrics").HTTPErrorLog())
		// Stopped before the TaskManager shuts down: a scrape never reads a TaskManager that is gone. A
		// server that failed while the TaskManager ran is said here (err is ServeTaskManager's result).
		defer func() {
			if serr := ms.Stop(); serr != nil {
				err = errors.Join(err, fmt.Errorf("taskmanager %s: %w", cfg.Name, serr))
			}
		}()
		if cfg.MetricsListening != nil {
			cfg.MetricsListening(metricsAddr)
		}
	}
	cat := &registryCatalog{jobs: jobs, log: lg}
	backoff := 100 * time.Millisecond
	lostSince := time.Now()
	// graceEnd is when the kept tasks are given up unless a leader took them over (zero: none kept).
	var graceEnd time.Time
	where := []any{"jobmanager", cfg.JobManager}
	if cfg.HA != nil {
		where = []any{"ha", strings.Join(cfg.HA.Endpoints, ","), "ha_cluster", cfg.HA.Cluster}
	}
	lg.Info("TaskManager started", append(append([]any{"name", cfg.Name, "slots", cfg.Slots, "data", tm.DataListenAddress()}, where...),
		"metrics", metricsAddr)...)
	for {
		// Credentials of each attempt's own, so that a failed TLS handshake explains only its attempt.
		creds := credentials.TransportCredentials(insecure.NewCredentials())
		var tlsCreds *rpc.ClientCredentials
		if clientTLS != nil {
			tlsCreds = rpc.NewClientCredentials(clientTLS, "the JobManager")
			creds = tlsCreds
		}
		jmAddr, err := cfg.JobManager, error(nil)
		var leader ha.LeaderInfo
		if hac != nil {
			lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			leader, err = hac.Leader(lctx)
			cancel()
			jmAddr = leader.Addr
			if err != nil && !errors.Is(err, ha.ErrNoLeader) && !graceEnd.IsZero() {
				graceEnd = time.Now().Add(cfg.Grace) // etcd unreachable: nobody can lead and take the tasks
			}
		}
		var s protocol.Session
		if err == nil {
			s, err = rpc.DialGateway(ctx, jmAddr, grpc.WithTransportCredentials(creds))
			err = tlsCreds.Explain(err)
		}
		if err == nil {
			registeredAt := time.Now()
			sessCtx, endSession := context.WithCancelCause(ctx)
			stopWatch := func() {}
			if hac != nil {
				// Leaving a deposed leader is no shutdown: the session just ends, without the notice
				// that the TaskManager leaves the cluster.
				stopWatch = leaveDeposed(sessCtx, hac, leader, func(epoch int64) { endSession(&cluster.LeaderChanged{Epoch: epoch}) }, lg)
			}
			err = tm.ServeLeader(sessCtx, s, cat, leader.Epoch)
			endSession(nil)
			stopWatch()
			if time.Since(registeredAt) > 5*time.Second {
				backoff, lostSince = 100*time.Millisecond, time.Now()
			}
			var refused *cluster.RefusedError
			if errors.As(err, &refused) && refused.Permanent {
				return fmt.Errorf("taskmanager %s: %w", cfg.Name, err)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		switch kept := tm.Kept(); {
		case kept == 0:
			graceEnd = time.Time{}
		case graceEnd.IsZero():
			graceEnd = time.Now().Add(cfg.Grace)
			lg.Warn("the leader is lost: the tasks keep running for the next leader", "jobs", kept, "grace", cfg.Grace)
		case time.Now().After(graceEnd):
			tm.DropKept(fmt.Sprintf("no JobManager took them over within --ha-grace %v", cfg.Grace))
			graceEnd = time.Time{}
		}
		if !graceEnd.IsZero() {
			backoff = min(backoff, leaderPoll) // the next leader is to be found as soon as it leads
		}
		if cfg.JobManagerWait > 0 && time.Since(lostSince) > cfg.JobManagerWait {
			return fmt.Errorf("taskmanager %s: no JobManager at %s for %v (--jobmanager-wait): %w", cfg.Name, cmp.Or(jmAddr, "the leader's address"), cfg.JobManagerWait, err)
		}
		lg.Warn("no session with the JobManager; registering again", "jobmanager", jmAddr, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// registryCatalog builds the jobs a TaskManager is asked to run from this binary's registry, with the
// arguments they were submitted with, and refuses a build whose graph is not the JobManager's.
type registryCatalog struct {
	jobs Jobs
	log  *slog.Logger
}

// Open implements cluster.Catalog.
func (c *registryCatalog) Open(ctx context.Context, _ protocol.JobID, setup protocol.SetupJob) (*cluster.JobBuild, error) {
	job, err := buildVerified(ctx, c.jobs, setup.Name, setup.Args, setup.Graph)
	if err != nil {
		return nil, err
	}
	return executor.TaskManagerBuild(ctx, job, setup, c.log)
}

// leaderPoll is how often a TaskManager with HA asks etcd who leads while it serves a leader.
const leaderPoll = 250 * time.Millisecond

// leaveDeposed watches, on a goroutine that the returned function stops and waits for, who leads the
// cluster while the TaskManager serves the leader of term served; once another term leads it ends the
// session (end), so that a deposed leader that has not noticed yet commands the TaskManager no more, and
// the TaskManager registers with the new one. etcd not answering changes nothing: the leader may still
// lead.
func leaveDeposed(ctx context.Context, hac *ha.Client, served ha.LeaderInfo, end func(epoch int64), lg *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(leaderPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			lctx, lcancel := context.WithTimeout(ctx, leaderPoll)
			now, err := hac.Leader(lctx)
			lcancel()
			if err == nil && now.Epoch != served.Epoch {
				lg.Warn("another JobManager leads the cluster: leaving the deposed one", "deposed", served.Addr, "epoch", served.Epoch,
					"leader", now.Addr, "leader_epoch", now.Epoch)
				end(now.Epoch)
				return
			}
		}
	}()
	return func() { cancel(); <-done }
}
