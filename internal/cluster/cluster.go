// Package cluster wires the runtime into processes: a TaskManager (slots, network memory, partition
// manager, TCP data server, the goroutines of its tasks) and the in-process MiniCluster (N TaskManagers in
// one process, which the public API's Execute runs a job master over). Tasks on the same TaskManager exchange
// data through local channels; tasks on different TaskManagers over TCP on loopback, through the same
// interfaces. Separate JobManager and TaskManager processes do not exist yet.
//
// Every goroutine started here has an owner that stops it: a TaskManager waits for its tasks and closes its
// server on Shutdown; a MiniCluster shuts its TaskManagers down on Close.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"

	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/task"
)

// TaskManagerConfig configures a TaskManager.
type TaskManagerConfig struct {
	Name  string
	Slots int
	// NetworkMemoryBytes is the budget of all buffer pools of the TaskManager's tasks.
	NetworkMemoryBytes int64
	BufferSize         int
	// DataAddress is where the TCP data server listens ("127.0.0.1:0" picks a port).
	DataAddress string
	// DataServer configures the TCP data server (connection limits, timeouts, TLS, the admission of
	// partition requests); zero values are the network package's defaults, and a nil Logger is the
	// TaskManager's.
	DataServer network.ServerOptions
	// DataDial configures the channels this TaskManager's tasks open to other TaskManagers' data servers
	// (TLS, timeouts); zero values are the network package's defaults. Its Job and Credential are left
	// zero here: they belong to each channel, and come with it once the job master issues credentials.
	DataDial network.DialOptions
	Logger   *slog.Logger
}

// DefaultNetworkMemoryBytes is the default network memory of a TaskManager.
const DefaultNetworkMemoryBytes = 128 << 20

// TaskManager hosts tasks.
type TaskManager struct {
	cfg    TaskManagerConfig
	log    *slog.Logger
	pm     *network.PartitionManager
	memory *network.NetworkMemory
	server *network.Server
	spill  string // spill directory of blocking partitions, removed at shutdown
	// snapshotWriters bounds the checkpoint writers running at once to half the cores (at least one), so
	// that writing large state leaves the tasks a core of their own.
	snapshotWriters chan struct{}

	mu sync.Mutex
	// tasks holds the attempts that run here, until their Run returns: at most one per slot-shared
	// subtask deployed here, and the attempts being cancelled for a restart. An attempt that ended is
	// forgotten (its final counters travel in its last task.Update), so a job that fails over again and
	// again does not accumulate the attempts it replaced.
	tasks    map[ident.Attempt]*task.Task
	wg       sync.WaitGroup
	shutdown bool
	// secrets holds the partition credential secret of each job set up here (SetupJob), by job id; its
	// bound is the jobs this TaskManager serves (ReleaseJob forgets them).
	secrets map[[network.JobIDSize]byte][]byte
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
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	lg = lg.With("taskmanager", cfg.Name)
	pm := network.NewPartitionManager()
	tm := &TaskManager{cfg: cfg, log: lg, pm: pm, memory: mem, tasks: make(map[ident.Attempt]*task.Task),
		secrets:         make(map[[network.JobIDSize]byte][]byte),
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
	return tm, nil
}

// SetupJob implements jobmaster.TaskManager: from now on the data server serves the job's partitions to
// consumers that present the credential made with secret.
func (tm *TaskManager) SetupJob(job [network.JobIDSize]byte, secret []byte) {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	tm.secrets[job] = append([]byte(nil), secret...)
}

// admit is the data server's check of a partition request: the job must be set up here and the
// credential must be the one its job master issued to that consumer attempt for that subpartition. A job
// not set up (yet) is "not found", which the consumer retries; a wrong credential is refused for good.
func (tm *TaskManager) admit(r network.PartitionRequest) (*network.PartitionManager, error) {
	tm.mu.Lock()
	secret, ok := tm.secrets[r.Job]
	tm.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("job %x is not set up on TaskManager %s: %w", r.Job[:4], tm.cfg.Name, network.ErrPartitionNotFound)
	}
	return nil, r.VerifyCredential(secret)
}

// Name implements jobmaster.TaskManager.
func (tm *TaskManager) Name() string { return tm.cfg.Name }

// DataAddress implements jobmaster.TaskManager.
func (tm *TaskManager) DataAddress() string { return tm.server.Addr() }

// Slots implements jobmaster.TaskManager.
func (tm *TaskManager) Slots() int { return tm.cfg.Slots }

// Partitions returns the TaskManager's partition manager.
func (tm *TaskManager) Partitions() *network.PartitionManager { return tm.pm }

// Memory returns the TaskManager's network memory.
func (tm *TaskManager) Memory() *network.NetworkMemory { return tm.memory }

// Submit implements jobmaster.TaskManager: the task runs on a goroutine the TaskManager owns.
func (tm *TaskManager) Submit(cfg task.Config, report func(task.Update)) error {
	env := task.Env{
		Partitions: tm.pm, Memory: tm.memory, Logger: tm.log, Report: report,
		ConnectRemote: tm.connectRemote, SpillDir: tm.spill, SnapshotWriters: tm.snapshotWriters,
	}
	t := task.New(cfg, env)
	tm.mu.Lock()
	if tm.shutdown {
		tm.mu.Unlock()
		return fmt.Errorf("TaskManager %s is shut down", tm.cfg.Name)
	}
	if _, dup := tm.tasks[cfg.Info.Attempt]; dup {
		tm.mu.Unlock()
		return fmt.Errorf("TaskManager %s already runs %s", tm.cfg.Name, cfg.Info.Attempt)
	}
	tm.tasks[cfg.Info.Attempt] = t
	tm.wg.Add(1)
	tm.mu.Unlock()
	go func() {
		defer tm.wg.Done()
		t.Run()
		tm.mu.Lock()
		delete(tm.tasks, cfg.Info.Attempt)
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

func (tm *TaskManager) connectRemote(ctx context.Context, spec task.ChannelSpec, owner ident.Attempt, pool *network.BufferPool, credits int, notify func()) (network.InputChannel, error) {
	opts := tm.cfg.DataDial
	opts.Job, opts.Credential = spec.Job, spec.Credential
	return network.DialRemoteChannel(ctx, spec.Address, spec.Partition, spec.Subpartition, owner, pool, credits, notify, opts)
}

// Cancel implements jobmaster.TaskManager.
func (tm *TaskManager) Cancel(a ident.Attempt) {
	tm.mu.Lock()
	t := tm.tasks[a]
	tm.mu.Unlock()
	if t != nil {
		t.Cancel()
	}
}

// TriggerCheckpoint implements jobmaster.TaskManager.
func (tm *TaskManager) TriggerCheckpoint(a ident.Attempt, id, ts int64, flags uint32) bool {
	tm.mu.Lock()
	t := tm.tasks[a]
	tm.mu.Unlock()
	return t != nil && t.TriggerCheckpoint(id, ts, flags)
}

// AbortCheckpoint implements jobmaster.TaskManager.
func (tm *TaskManager) AbortCheckpoint(a ident.Attempt, id int64) {
	tm.mu.Lock()
	t := tm.tasks[a]
	tm.mu.Unlock()
	if t != nil {
		t.AbortCheckpoint(id)
	}
}

// NotifyCheckpointComplete implements jobmaster.TaskManager.
func (tm *TaskManager) NotifyCheckpointComplete(a ident.Attempt, id int64) {
	tm.mu.Lock()
	t := tm.tasks[a]
	tm.mu.Unlock()
	if t != nil {
		t.NotifyCheckpointComplete(id)
	}
}

// SubpartitionStats implements jobmaster.TaskManager.
func (tm *TaskManager) SubpartitionStats(p ident.PartitionID, sub int) (network.SubpartitionStats, bool) {
	rp, err := tm.pm.Lookup(p)
	if err != nil || sub < 0 || sub >= rp.NumSubpartitions() {
		return network.SubpartitionStats{}, false
	}
	return rp.Subpartition(sub).Stats(), true
}

// ReleasePartitions implements jobmaster.TaskManager.
func (tm *TaskManager) ReleasePartitions(a ident.Attempt) { tm.pm.ReleaseProducedBy(a) }

// Counters implements jobmaster.TaskManager; an attempt that ended is not known anymore (its final counts
// came with its terminal update).
func (tm *TaskManager) Counters(a ident.Attempt) (in, out uint64, ok bool) {
	tm.mu.Lock()
	t := tm.tasks[a]
	tm.mu.Unlock()
	if t == nil {
		return 0, 0, false
	}
	in, out = t.Counters().Snapshot()
	return in, out, true
}

// ReleaseJob releases all partitions and forgets the jobs' credential secrets (the job ended).
func (tm *TaskManager) ReleaseJob() {
	tm.pm.ReleaseAll()
	tm.mu.Lock()
	clear(tm.secrets)
	tm.mu.Unlock()
}

// Shutdown cancels all tasks, waits for them, releases all partitions and stops the data server.
func (tm *TaskManager) Shutdown() error {
	tm.mu.Lock()
	tm.shutdown = true
	for _, t := range tm.tasks {
		t.Cancel()
	}
	tm.mu.Unlock()
	tm.wg.Wait()
	tm.pm.ReleaseAll()
	err := tm.server.Close()
	return errors.Join(err, os.RemoveAll(tm.spill))
}

// MiniClusterConfig configures an in-process cluster.
type MiniClusterConfig struct {
	TaskManagers       int
	SlotsPerTM         int
	NetworkMemoryBytes int64
	BufferSize         int
	Logger             *slog.Logger
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
			Name: fmt.Sprintf("tm-%d", i+1), Slots: cfg.SlotsPerTM, NetworkMemoryBytes: cfg.NetworkMemoryBytes,
			BufferSize: cfg.BufferSize, Logger: cfg.Logger,
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
