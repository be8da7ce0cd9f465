// Package cluster is the TaskManager: slots, network memory, one partition manager per job, the TCP data
// server (which serves a job's partitions only to consumers with the credential its job master issued), the
// goroutines of its tasks, and Serve, its side of a session with a JobManager (protocol.Session): it
// registers, builds each job it is asked to run through a Catalog, deploys, cancels and checkpoints tasks as
// told, and reports their updates, counters and accumulators. The same TaskManager runs in its own process
// (the root package's ServeTaskManager, over gRPC) and in the mini-cluster (over an in-memory pipe). Tasks on
// the same TaskManager exchange data through local channels; tasks on different TaskManagers over TCP.
//
// It must not import the job master's runtime (internal/jobmaster) or the public API: it knows the JobManager
// only as the other end of a session.
//
// Every goroutine started here has an owner that stops it: Serve stops its ticker and cancels and waits for
// every task when its session ends; Shutdown cancels what runs and closes the data server.
package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"

	"github.com/jonboulle/clockwork"

	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/task"
)

// TaskManagerConfig configures a TaskManager.
type TaskManagerConfig struct {
	Name  string
	Slots int
	// NetworkMemoryBytes is the budget of all buffer pools of the TaskManager's tasks.
	NetworkMemoryBytes int64
	// InflightLogMemory is the memory of the in-flight logs of task failover before they spill (0:
	// InflightLogMemory, the constant).
	InflightLogMemory int64
	// InflightLogDisk is the disk the in-flight logs spill to past their memory (0: InflightLogDisk, the
	// constant; negative: none, a log past its memory drops what it holds).
	InflightLogDisk int64
	BufferSize      int
	// DataAddress is where the TCP data server listens ("127.0.0.1:0" picks a port).
	DataAddress string
	// DataAdvertise, when set, is the address other TaskManagers are told to reach the data server at
	// (a proxy, a NAT, a host name): DataAddress is where it listens.
	DataAdvertise string
	// Build is the binary this TaskManager runs, sent at registration.
	Build protocol.Build
	// Registered, when set, is called each time Serve registered with a JobManager.
	Registered func()
	// DataServer configures the TCP data server (connection limits, timeouts, TLS, the admission of
	// partition requests); zero values are the network package's defaults, and a nil Logger is the
	// TaskManager's.
	DataServer network.ServerOptions
	// DataDial configures the channels this TaskManager's tasks open to other TaskManagers' data servers
	// (TLS, timeouts); zero values are the network package's defaults. Its Job and Credential are left
	// zero here: they belong to each channel, and come with it once the job master issues credentials.
	DataDial network.DialOptions
	Logger   *slog.Logger
	// Clock is the processing time of the TaskManager's tasks; nil: the wall clock.
	Clock clockwork.Clock
	// KeepTasks keeps the tasks running when a session ends for any reason but the TaskManager's own
	// shutdown (task continuity under high availability, keep.go): the next registration reports them to
	// the JobManager it registers with. Without it a session's end cancels every task.
	KeepTasks bool
}

// DefaultNetworkMemoryBytes is the default network memory of a TaskManager.
const DefaultNetworkMemoryBytes = 128 << 20

// TaskManager hosts tasks.
type TaskManager struct {
	cfg    TaskManagerConfig
	log    *slog.Logger
	memory *network.NetworkMemory
	server *network.Server
	spill  string // spill directory of blocking partitions (and in-flight logs), removed at shutdown
	// logs is the memory and disk of the in-flight logs of logged partitions (task failover): 1 GiB,
	// then up to 4 GiB spilled to the spill directory (by default: InflightLogMemory, InflightLogDisk) by
	// the budget's spiller goroutine, which Shutdown stops.
	logs *network.LogBudget
	// snapshotWriters bounds the checkpoint writers running at once to half the cores (at least one), so
	// that writing large state leaves the tasks a core of their own.
	snapshotWriters chan struct{}

	mu sync.Mutex
	// tasks holds the attempts that run here, until their Run returns: at most one per slot-shared
	// subtask deployed here, and the attempts being cancelled for a restart. An attempt that ended is
	// forgotten (its final counters travel in its last deploy.Update), so a job that fails over again and
	// again does not accumulate the attempts it replaced.
	tasks    map[taskKey]*task.Task
	wg       sync.WaitGroup
	shutdown bool
	// jobs holds the jobs set up here (SetupJob) until they are released (ReleaseJob, or the end of the
	// session): bounded by the jobs the JobManager runs here at once.
	jobs map[protocol.JobID]*tmJob

	// outMu guards where the tasks' messages go (keep.go): out, the current session (nil between
	// sessions), kept, the jobs kept running without a JobManager and not yet adopted (bounded by jobs),
	// and every job's jobState.
	outMu sync.Mutex
	out   protocol.Session
	kept  map[protocol.JobID]*keptJob
}

// NewTaskManager starts a TaskManager and its data server.
func NewTaskManager(cfg TaskManagerConfig) (*TaskManager, error) {
	if cfg.Slots < 1 {
		return nil, fmt.Errorf("TaskManager %s: slots must be at least 1, got %d", cfg.Name, cfg.Slots)
	}
	if cfg.NetworkMemoryBytes == 0 {
		cfg.NetworkMemoryBytes = DefaultNetworkMemoryBytes
	}
	if cfg.BufferSize == 0 {
		cfg.BufferSize = network.DefaultBufferSize
	}
	if cfg.DataAddress == "" {
		cfg.DataAddress = "127.0.0.1:0"
	}
	mem, err := network.NewNetworkMemory(cfg.NetworkMemoryBytes, cfg.BufferSize)
	if err != nil {
		return nil, fmt.Errorf("TaskManager %s: %w", cfg.Name, err)
	}
	lg := cmp.Or(cfg.Logger, slog.Default())
	lg = lg.With("taskmanager", cfg.Name)
	// The server's own partition manager stays empty: every request is admitted to its job's (admit).
	pm := network.NewPartitionManager()
	tm := &TaskManager{cfg: cfg, log: lg, memory: mem, tasks: make(map[taskKey]*task.Task),
		jobs: make(map[protocol.JobID]*tmJob), kept: make(map[protocol.JobID]*keptJob),
		snapshotWriters: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
	so := cfg.DataServer
	if so.Logger == nil {
		so.Logger = lg
	}
	if so.Admit == nil {
		so.Admit = tm.admit
	}
	srv, err := network.NewServer(pm, cfg.DataAddress, so)
	if err != nil {
		return nil, fmt.Errorf("TaskManager %s: start data server: %w", cfg.Name, err)
	}
	spill, err := os.MkdirTemp("", "runnel-"+cfg.Name+"-spill-")
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("TaskManager %s: spill directory: %w", cfg.Name, err)
	}
	tm.server, tm.spill = srv, spill
	logMem := cfg.InflightLogMemory
	if logMem == 0 {
		logMem = InflightLogMemory
	}
	logDisk := cfg.InflightLogDisk
	if logDisk == 0 {
		logDisk = InflightLogDisk
	}
	if tm.logs, err = network.NewLogBudget(logMem); err == nil && logDisk > 0 {
		err = tm.logs.Spill(spill, logDisk)
	}
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("TaskManager %s: in-flight logs: %w", cfg.Name, err)
	}
	return tm, nil
}

// The in-flight logs' budget of a TaskManager (docs/taskfailover.md §2.3): memory, then disk. Memory is
// taken in chunks as the logs grow and kept for reuse once taken (up to the budget): 1 GiB holds a second
// of the standard pipeline's keyed edge at about 50M records/s, so that it does not spill with checkpoints
// every second (docs/taskfailover.md §10).
const (
	InflightLogMemory = 1 << 30
	InflightLogDisk   = 4 << 30
)

// admit is the data server's check of a partition request: the job must be set up here and the
// credential must be the one its job master issued to that consumer attempt for that subpartition. A job
// not set up (yet) is "not found", which the consumer retries; a wrong credential is refused for good. The
// partitions are looked up in the job's own partition manager.
func (tm *TaskManager) admit(r network.PartitionRequest) (*network.PartitionManager, error) {
	j := tm.job(protocol.JobID(r.Job))
	if j == nil {
		return nil, fmt.Errorf("job %x is not set up on TaskManager %s: %w", r.Job[:4], tm.cfg.Name, network.ErrPartitionNotFound)
	}
	if err := r.VerifyCredential(j.setup.Secret); err != nil {
		return nil, err
	}
	return j.pm, nil
}

// Name identifies the TaskManager in reports ("tm-1").
func (tm *TaskManager) Name() string { return tm.cfg.Name }

// DataAddress is the address other TaskManagers reach its data server at: DataAdvertise if set, else the
// address the server listens on.
func (tm *TaskManager) DataAddress() string {
	if tm.cfg.DataAdvertise != "" {
		return tm.cfg.DataAdvertise
	}
	return tm.server.Addr()
}

// DataListenAddress is the address the data server listens on.
func (tm *TaskManager) DataListenAddress() string { return tm.server.Addr() }

// Slots is the number of task slots.
func (tm *TaskManager) Slots() int { return tm.cfg.Slots }

// InflightLogs returns the budget of the TaskManager's in-flight logs (task failover): its memory and disk
// use, for metrics.
func (tm *TaskManager) InflightLogs() *network.LogBudget { return tm.logs }

// Memory returns the TaskManager's network memory.
func (tm *TaskManager) Memory() *network.NetworkMemory { return tm.memory }

// start runs a task on a goroutine the TaskManager owns.
func (tm *TaskManager) start(job protocol.JobID, pm *network.PartitionManager, cfg task.Config, report func(deploy.Update)) error {
	env := task.Env{
		Partitions: pm, Memory: tm.memory, Logger: tm.log, Report: report,
		ConnectRemote: tm.connectRemote, SpillDir: tm.spill, SnapshotWriters: tm.snapshotWriters, Clock: tm.cfg.Clock,
		LogBudget: tm.logs,
	}
	t := task.New(cfg, env)
	k := taskKey{job, cfg.Info.Attempt}
	tm.mu.Lock()
	if tm.shutdown {
		tm.mu.Unlock()
		return fmt.Errorf("TaskManager %s is shut down", tm.cfg.Name)
	}
	if _, dup := tm.tasks[k]; dup {
		tm.mu.Unlock()
		return fmt.Errorf("TaskManager %s already runs %s", tm.cfg.Name, cfg.Info.Attempt)
	}
	tm.tasks[k] = t
	tm.wg.Add(1)
	tm.mu.Unlock()
	go func() {
		defer tm.wg.Done()
		t.Run()
		tm.mu.Lock()
		delete(tm.tasks, k)
		tm.mu.Unlock()
	}()
	return nil
}

// NumTasks returns how many task attempts the TaskManager holds: those that have not ended.
func (tm *TaskManager) NumTasks() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	return len(tm.tasks)
}

// NumPartitions returns how many result partitions the TaskManager holds, over all its jobs.
func (tm *TaskManager) NumPartitions() int {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	n := 0
	for _, j := range tm.jobs {
		n += j.pm.Len()
	}
	return n
}

func (tm *TaskManager) connectRemote(ctx context.Context, spec deploy.ChannelSpec, owner ident.Attempt, pool *network.BufferPool, credits int, notify func(), replayFrom int64) (network.InputChannel, error) {
	opts := tm.cfg.DataDial
	opts.Job, opts.Credential, opts.ReplayFrom = spec.Job, spec.Credential, replayFrom
	return network.DialRemoteChannel(ctx, spec.Address, spec.Partition, spec.Subpartition, owner, pool, credits, notify, opts)
}

// Shutdown cancels all tasks, waits for them, releases every job and stops the data server.
func (tm *TaskManager) Shutdown() error {
	tm.mu.Lock()
	tm.shutdown = true
	tm.mu.Unlock()
	tm.cancelAll()
	err := tm.server.Close()
	// The tasks are gone: stop the in-flight logs' spiller (it finishes the chunk it writes) before its
	// directory goes.
	tm.logs.Close()
	return errors.Join(err, os.RemoveAll(tm.spill))
}

// MiniClusterConfig configures an in-process cluster.
type MiniClusterConfig struct {
	TaskManagers       int
	SlotsPerTM         int
	NetworkMemoryBytes int64
	InflightLogMemory  int64
	InflightLogDisk    int64 // as TaskManagerConfig's
	BufferSize         int
	Logger             *slog.Logger
	// Clock is the processing time of every task; nil: the wall clock.
	Clock clockwork.Clock
}

// MiniCluster is a job master's TaskManagers, all in this process.
type MiniCluster struct {
	TMs []*TaskManager
}

// StartMiniCluster starts the TaskManagers.
func StartMiniCluster(cfg MiniClusterConfig) (*MiniCluster, error) {
	if cfg.TaskManagers < 1 {
		return nil, fmt.Errorf("mini-cluster: at least one TaskManager is needed, got %d", cfg.TaskManagers)
	}
	mc := &MiniCluster{}
	for i := 0; i < cfg.TaskManagers; i++ {
		tm, err := NewTaskManager(TaskManagerConfig{
			Name: fmt.Sprintf("tm-%d", i+1), Slots: cfg.SlotsPerTM, NetworkMemoryBytes: cfg.NetworkMemoryBytes, InflightLogMemory: cfg.InflightLogMemory,
			InflightLogDisk: cfg.InflightLogDisk, BufferSize: cfg.BufferSize, Logger: cfg.Logger, Clock: cfg.Clock,
		})
		if err != nil {
			_ = mc.Close()
			return nil, err
		}
		mc.TMs = append(mc.TMs, tm)
	}
	return mc, nil
}

// Close shuts every TaskManager down.
func (mc *MiniCluster) Close() error {
	var errs []error
	for _, tm := range mc.TMs {
		errs = append(errs, tm.Shutdown())
	}
	return errors.Join(errs...)
}
