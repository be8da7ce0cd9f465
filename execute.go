package runnel

import (
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/task"
)

// JobResult describes a job run; its JSON form is the `--report` contract of the runnel command (fields are
// only ever added, never renamed).
type JobResult struct {
	Job        string         `json:"job"`
	Status     string         `json:"status"`
	Error      string         `json:"error"`
	WallMillis int64          `json:"wall_ms"`
	Vertices   []VertexResult `json:"vertices"`
	// Checkpoints is present when checkpointing is on.
	Checkpoints *CheckpointCounts `json:"checkpoints,omitempty"`
	// Failovers lists the failover events, oldest first: the last 1000 of them (FailoverTotals counts all).
	Failovers []FailoverResult `json:"failovers"`
	// FailoverTotals sums every failover of the run, those the list omits included.
	FailoverTotals FailoverTotals `json:"failover_totals"`
	// Savepoint is the directory of the savepoint written when the job was stopped.
	Savepoint string `json:"savepoint,omitempty"`
	// RestoredFrom says which savepoint or retained checkpoint the job started from.
	RestoredFrom *RestoreResult `json:"restored_from,omitempty"`
	// Waiting, while the job waits for something to restart (slots, a TaskManager), says what.
	Waiting string `json:"waiting,omitempty"`
	// UnfiredInjections lists, once the job ended, the failure injections (WithFailureInjection) that never
	// fired: the job ended before they were due (a record count its subtask never saw, a checkpoint that
	// never completed). Each is also logged at WARN.
	UnfiredInjections []string `json:"unfired_injections,omitempty"`
}

// RestoreResult describes the state a job started from: the location, the checkpoint's id, and the newer
// checkpoints that were passed over because they were corrupt, truncated or incomplete.
type RestoreResult struct {
	Location     string   `json:"location"`
	CheckpointID int64    `json:"checkpoint_id"`
	Skipped      []string `json:"skipped"`
	// Finished says that the job had already finished in that checkpoint: every subtask had finished, or
	// its input had ended, when it was taken (the final checkpoint of a bounded job is such a one). As
	// Flink finishes the operators a checkpoint records as finished when it restores it, this run reads and
	// emits nothing: its tasks take the final checkpoint they owe and finish at once.
	Finished bool `json:"finished"`
}

// alreadyFinished reports whether every subtask of the savepoint had finished, or its input had ended, when
// it was taken: the job had already finished in it. A subtask that finished holds no state; one whose
// input ended says so in the last blob of its handle (task.InputEndedInState). The subtasks of the job's
// sources are read first: in a savepoint of a running job they had not ended, and their state is small, so
// that the answer "no" costs little.
func alreadyFinished(ctx context.Context, sp *checkpoint.Savepoint, jg *graph.JobGraph) (bool, error) {
	cp := sp.Checkpoint
	if len(cp.States) == 0 {
		return false, nil
	}
	sources := map[string]bool{}
	for _, v := range jg.Vertices {
		if v.IsSource() {
			sources[v.UIDs()[0]] = true
		}
	}
	isSource := func(h checkpoint.StateHandle) bool {
		v, ok := cp.VertexByID(h.Attempt.Vertex)
		return ok && slices.ContainsFunc(v.Operators, func(uid string) bool { return sources[uid] })
	}
	handles := slices.Clone(cp.States)
	slices.SortStableFunc(handles, func(a, b checkpoint.StateHandle) int {
		switch as, bs := isSource(a), isSource(b); {
		case as && !bs:
			return -1
		case bs && !as:
			return 1
		}
		return 0
	})
	for _, h := range handles {
		if h.Finished {
			continue
		}
		if len(h.Blobs) == 0 {
			return false, nil
		}
		payload, err := sp.ReadState(ctx, h.Blobs[len(h.Blobs)-1])
		if err != nil {
			return false, err
		}
		ended, err := task.InputEndedInState(payload)
		if err != nil {
			return false, fmt.Errorf("state of %s: %w", h.Attempt, err)
		}
		if !ended {
			return false, nil
		}
	}
	return true, nil
}

// openRestore opens a savepoint directory, or, for a checkpoint storage directory, its newest valid
// retained checkpoint. Newer checkpoints it passes over are listed in the result and logged: a damaged one
// (corrupt, truncated, of an unknown format) at WARN, one that was never committed at INFO. Nothing is
// created: a directory that does not exist is an error naming it.
func openRestore(ctx context.Context, dir string, lg *slog.Logger) (*checkpoint.Savepoint, *RestoreResult, error) {
	info := &RestoreResult{Location: dir, Skipped: []string{}}
	sp, err := checkpoint.ReadSavepoint(ctx, dir)
	if err == nil {
		info.CheckpointID = sp.Checkpoint.ID
		return sp, info, nil
	}
	if !errors.Is(err, checkpoint.ErrNotFound) {
		return nil, nil, err
	}
	st, oerr := checkpoint.OpenExisting(ctx, dir)
	if oerr != nil {
		return nil, nil, oerr
	}
	defer st.Close()
	cp, skipped, lerr := st.Latest(ctx)
	for _, sk := range skipped {
		info.Skipped = append(info.Skipped, fmt.Sprintf("chk-%d: %v", sk.ID, sk.Err))
		attrs := []any{"location", dir, "skipped", fmt.Sprintf("chk-%d", sk.ID), "problem", sk.Err.Error()}
		if cp != nil {
			attrs = append(attrs, "restoring", fmt.Sprintf("chk-%d", cp.ID))
		}
		if errors.Is(sk.Err, checkpoint.ErrIncomplete) {
			lg.Info("restore: passing over a checkpoint that was never committed", attrs...)
		} else {
			lg.Warn("restore: passing over a damaged checkpoint", attrs...)
		}
	}
	if lerr != nil {
		return nil, nil, fmt.Errorf("no savepoint here, and no valid retained checkpoint: %w", lerr)
	}
	sp, err = checkpoint.ReadSavepoint(ctx, strings.TrimSuffix(dir, "/")+fmt.Sprintf("/chk-%d", cp.ID))
	if err != nil {
		return nil, nil, err
	}
	info.CheckpointID = cp.ID
	return sp, info, nil
}

// CheckpointCounts counts the checkpoints of a job run.
type CheckpointCounts struct {
	Completed       int64 `json:"completed"`
	Failed          int64 `json:"failed"`
	Aborted         int64 `json:"aborted"`
	LastCompletedID int64 `json:"last_completed_id"`
}

// FailoverResult is one failover: the subtask that failed ("VERTEX[i]", or "job" for a failure of the job as a
// whole, such as too many failed checkpoints in a row, which restarts every subtask), the strategy, the subtasks
// restarted, the checkpoint their state came from (nil: none, they started empty), and the time from the
// failure until every restarted subtask was running again.
type FailoverResult struct {
	Failed string `json:"failed"`
	// FailedSubtasks lists every subtask that failed in this event when there were several: those of a
	// lost TaskManager.
	FailedSubtasks []string `json:"failed_subtasks,omitempty"`
	// TaskManager names the TaskManager whose loss caused the failover ("" for a task's own failure).
	TaskManager string `json:"taskmanager,omitempty"`
	Cause       string `json:"cause"`
	// FailedAt is when the job master learned of the failure; the durations below are measured from it.
	FailedAt time.Time `json:"failed_at"`
	Strategy string    `json:"strategy"`
	// Fallback, under task failover, says why this failover restarted by region instead.
	Fallback           string   `json:"fallback,omitempty"`
	Restarted          []string `json:"restarted"`
	CheckpointRestored *int64   `json:"checkpoint_restored"`
	RecoveryMillis     int64    `json:"recovery_ms"`
	// OutageMillis runs from the failure until the restarted tail subtasks emitted output again. Both
	// durations are rounded up to whole milliseconds.
	OutageMillis int64 `json:"outage_ms"`
	// RecordsLost is the whole loss of the failover (records after the restored consumers' positions that
	// they never received); the others are its parts as the producers saw them.
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
	// Channels breaks the loss down by channel, for the channels that lost anything.
	Channels []ChannelLossResult `json:"channels,omitempty"`
	// RecordsReplayed counts, under task failover, the records the restarted subtask read again from its
	// producers' in-flight logs; DuplicatesDropped those its consumers dropped because it regenerated them
	// (they had had them before it failed). Replay breaks both down by channel.
	RecordsReplayed   uint64                `json:"records_replayed"`
	DuplicatesDropped uint64                `json:"duplicates_dropped"`
	Replay            []ChannelReplayResult `json:"replay,omitempty"`
}

// ChannelReplayResult is what task failover did on one channel in one failover: on a channel into the
// restarted subtask, the records it replayed; on one out of it, the duplicates its consumer dropped.
type ChannelReplayResult struct {
	From              string `json:"from"`
	To                string `json:"to"`
	RecordsReplayed   uint64 `json:"records_replayed"`
	DuplicatesDropped uint64 `json:"duplicates_dropped"`
}

// ChannelLossResult is the loss of one channel in one failover, from a producer subtask ("VERTEX[i]") that
// kept running (or was restarted) to a restarted consumer.
type ChannelLossResult struct {
	From                  string `json:"from"`
	To                    string `json:"to"`
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
}

// FailoverTotals sums every failover of a run. Failovers counts them; Omitted those no longer listed in
// JobResult.Failovers, which keeps the last 1000 so that a long job's memory stays flat. Edges breaks the
// loss down by edge of the job graph (tasks, by name), over all failovers.
type FailoverTotals struct {
	Failovers             int    `json:"failovers"`
	Omitted               int    `json:"omitted"`
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
	// RecordsReplayed and DuplicatesDropped sum those of the task failovers.
	RecordsReplayed   uint64           `json:"records_replayed"`
	DuplicatesDropped uint64           `json:"duplicates_dropped"`
	Edges             []EdgeLossResult `json:"edges"`
}

// EdgeLossResult is the loss on the channels from one task to another, over all failovers.
type EdgeLossResult struct {
	From                  string `json:"from"`
	To                    string `json:"to"`
	RecordsLost           uint64 `json:"records_lost"`
	RecordsDropped        uint64 `json:"records_dropped"`
	BuffersDropped        uint64 `json:"buffers_dropped"`
	PartialRecordsSkipped uint64 `json:"partial_records_skipped"`
}

// VertexResult describes one task (a chain of operators) of the job.
type VertexResult struct {
	Name        string          `json:"name"`
	Operators   []string        `json:"operators"`
	Parallelism int             `json:"parallelism"`
	Inputs      []InputResult   `json:"inputs"`
	RecordsIn   uint64          `json:"records_in"`
	RecordsOut  uint64          `json:"records_out"`
	Subtasks    []SubtaskResult `json:"subtasks"`
}

// InputResult describes one input edge of a vertex.
type InputResult struct {
	From    string `json:"from"`
	Pattern string `json:"pattern"`
}

// SubtaskResult describes one parallel instance of a vertex.
type SubtaskResult struct {
	Index       int    `json:"index"`
	Attempt     int    `json:"attempt"`
	TaskManager string `json:"taskmanager"`
	State       string `json:"state"`
	RecordsIn   uint64 `json:"records_in"`
	RecordsOut  uint64 `json:"records_out"`
	// Watermark is the subtask's current event-time watermark (epoch ms): its input watermark, or for a
	// source what it emitted last; absent while it has none (a job without event time, or before the
	// first). MaxWatermark once its input ended.
	Watermark *int64 `json:"watermark,omitempty"`
	// Metrics are the operator metrics of the subtask's current attempt, by "operator/name": the counters
	// and gauges its functions registered (RuntimeContext.Metrics) and the engine's own, such as a
	// window's late_records_dropped.
	Metrics map[string]int64 `json:"metrics,omitempty"`
}

// Vertex returns the vertex that contains the named operator, or nil.
func (r *JobResult) Vertex(operatorName string) *VertexResult {
	for i := range r.Vertices {
		for _, op := range r.Vertices[i].Operators {
			if op == operatorName {
				return &r.Vertices[i]
			}
		}
	}
	return nil
}

// jobGraph validates the job and returns its vertices after chaining.
func (e *Environment) jobGraph(name string, exchange graph.ExchangeMode, pipelined graph.PartitionType) (*graph.JobGraph, error) {
	if err := e.cfg.validate(); err != nil {
		return nil, err
	}
	if err := e.Err(); err != nil {
		return nil, err
	}
	sg := &graph.StreamGraph{JobName: name, Nodes: e.nodes, Edges: e.edges}
	jg, err := graph.BuildJobGraph(sg, graph.JobGraphOptions{Chaining: e.cfg.Chaining, PipelinedType: pipelined, Exchange: exchange})
	if err != nil {
		return nil, err
	}
	// Only edges that cross a task boundary need a codec.
	var errs []error
	for _, je := range jg.Edges {
		for _, r := range e.resolvers {
			if r.edge == je.Stream {
				if err := r.resolve(); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return jg, errors.Join(errs...)
}

// Execute runs the job in an in-process cluster and blocks until it ends: FINISHED when every source ended
// and all records were processed, FAILED when a task failed (the error names the subtask), CANCELED when ctx
// was cancelled first. The result is returned in every case where the job ran; err is non-nil unless the
// job finished or was cancelled.
func (e *Environment) Execute(ctx context.Context, name string) (*JobResult, error) {
	if e.executed {
		return nil, errors.New("Execute: an Environment runs one job; make a new Environment for another")
	}
	e.executed = true
	if ln := e.cfg.MetricsListener; ln != nil {
		defer ln.Close() // also when the job never starts; the metrics server closes it first otherwise
	}
	p, err := prepare(ctx, e, name)
	if err != nil {
		return nil, err
	}
	jg := p.jg
	// The tasks run the operators (and fire the injections) of chains: this build, or the other build a
	// test put in its place, as a TaskManager runs its own.
	chains := p
	if e.chainsFrom != nil {
		if err := sameBuild(name, p.fingerprint, e.chainsFrom.fingerprint); err != nil {
			return nil, err
		}
		chains = e.chainsFrom
	}
	maxP := 0
	for _, v := range jg.Vertices {
		if e.cfg.NoSlotSharing {
			maxP += v.Parallelism
		} else {
			maxP = max(maxP, v.Parallelism)
		}
	}
	slots := e.cfg.SlotsPerTM
	if slots == 0 {
		slots = (maxP + e.cfg.TaskManagers - 1) / e.cfg.TaskManagers
	}
	mc, err := startMiniCluster(cluster.MiniClusterConfig{
		TaskManagers: e.cfg.TaskManagers, SlotsPerTM: slots, NetworkMemoryBytes: e.cfg.NetworkMemoryBytes, InflightLogMemory: e.cfg.InflightLogMemory,
		InflightLogDisk: e.cfg.InflightLogDisk,
		BufferSize:      e.cfg.BufferSize, Logger: e.cfg.Logger, Clock: e.cfg.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	defer mc.close()
	if clusterStarted != nil {
		clusterStarted(mc.MiniCluster)
	}
	return e.run(ctx, p, runOn{dispatcher: mc.dispatcher, requireSlots: true, catalog: mc.catalog, chains: chains, taskManagers: mc.TMs})
}

// runOn says where run runs a job: the dispatcher of its TaskManagers, and for the mini-cluster the catalog
// through which they take the job's operators (chains) and storage from this process.
type runOn struct {
	dispatcher   *jobmaster.Dispatcher
	requireSlots bool
	catalog      *inProcessCatalog
	chains       *prepared
	// cluster marks TaskManagers in other processes: checkpoint storage must be shared, and the
	// accumulators their tasks built are merged into this Environment's at the end.
	cluster bool
	// slotWait bounds the job's wait for slots (0: the job master's default).
	slotWait time.Duration
	// started, when set, is called with the driver before the job starts (the JobManager's table of jobs).
	started func(*jobmaster.Driver)
	// taskManagers are the mini-cluster's TaskManagers, whose in-flight logs the job's metrics show.
	taskManagers []*cluster.TaskManager
}

// run runs a prepared job on the TaskManagers of on and blocks until it ends (see Execute).
func (e *Environment) run(ctx context.Context, p *prepared, on runOn) (*JobResult, error) {
	name, rc, jg := p.name, p.rc, p.jg
	var build *cluster.JobBuild
	if on.catalog != nil {
		chains := on.chains
		build = &cluster.JobBuild{ChainFor: func(id ident.VertexID) (task.ChainFactory, error) {
			v := jg.Vertex(id)
			if v == nil {
				return nil, fmt.Errorf("job %q has no vertex %d", name, id)
			}
			return chains.chainFor(v.ID), nil
		}, Incremental: rc.incremental, SyncInjections: chains.syncInjections}
		on.catalog.build = build
	}
	jmCfg := jobmaster.Config{
		Job: jg, Dispatcher: on.dispatcher, RequireSlots: on.requireSlots, CollectAccumulators: on.cluster, SlotWaitTimeout: on.slotWait,
		Setup:         protocol.SetupJob{Args: p.args, Graph: p.fingerprint},
		BufferTimeout: e.cfg.BufferTimeout, MaxRecordSize: e.cfg.MaxRecordSize, Logger: e.cfg.Logger,
		Failover: rc.failover, Restart: rc.restart, StateBackend: rc.backend, Scheduling: rc.scheduling,
		NoSlotSharing: e.cfg.NoSlotSharing,
	}
	if rc.checkpointing {
		loc := rc.storage
		if on.cluster && (loc == "" || strings.HasPrefix(loc, "mem://")) {
			return nil, fmt.Errorf("job %q: checkpointing on a cluster needs --checkpoint-storage naming storage that every process reaches (a shared directory or s3://); %s cannot be", name, storageWord(loc))
		}
		if loc == "" {
			dir, err := os.MkdirTemp("", "runnel-checkpoints-")
			if err != nil {
				return nil, fmt.Errorf("job %q: checkpoint storage: %w", name, err)
			}
			defer os.RemoveAll(dir)
			loc = dir
		}
		st, err := checkpoint.Open(ctx, loc)
		if err != nil {
			return nil, fmt.Errorf("job %q: CheckpointConfig.Storage: %w", name, err)
		}
		defer st.Close()
		cc := rc.checkpoint
		jmCfg.Checkpoint, jmCfg.Storage = &cc, st
		jmCfg.Setup.CheckpointStorage = loc
		if on.cluster {
			// Every TaskManager reads this back before it runs the job: proof that they share the storage.
			probe, nonce := make([]byte, 8), make([]byte, 16)
			_, _ = cryptorand.Read(probe)
			_, _ = cryptorand.Read(nonce)
			jmCfg.Setup.Probe, jmCfg.Setup.ProbeNonce = hex.EncodeToString(probe), nonce
			if err := st.WriteProbe(ctx, jmCfg.Setup.Probe, nonce); err != nil {
				return nil, fmt.Errorf("job %q: CheckpointConfig.Storage: %w", name, err)
			}
			defer func() { _ = st.DeleteProbe(context.Background(), jmCfg.Setup.Probe) }()
		}
		if build != nil {
			build.Store = st
		}
	}
	jmCfg.SavepointOnStop = rc.savepointDir
	var restored *RestoreResult
	if rc.restoreFrom != "" {
		lg := cmp.Or(e.cfg.Logger, slog.Default())
		sp, info, err := openRestore(ctx, rc.restoreFrom, lg)
		if err != nil {
			return nil, fmt.Errorf("job %q: restore from savepoint %s: %w", name, rc.restoreFrom, err)
		}
		restored = info
		defer sp.Close()
		dropped, err := jobcore.CheckRestore(sp.Checkpoint, jobcore.RestoreCheck{
			Vertices: jg.Vertices,
			// A source's position cannot be split over another parallelism, unless it keeps it in operator
			// list state (RescalableSource).
			Fixed:                 func(v *graph.JobVertex) bool { return v.IsSource() && !operator.SourceRescalable(v.Nodes[0].Payload) },
			AllowNonRestoredState: rc.allowDropped,
		})
		if err != nil {
			return nil, fmt.Errorf("job %q: restore from savepoint %s: %w", name, rc.restoreFrom, err)
		}
		if len(dropped) > 0 {
			lg.Warn("restore: dropping the state of operators the job no longer has (allow-non-restored-state)",
				"job", name, "location", rc.restoreFrom, "uids", dropped)
		}
		if info.Finished, err = alreadyFinished(ctx, sp, jg); err != nil {
			return nil, fmt.Errorf("job %q: restore from savepoint %s: %w", name, rc.restoreFrom, err)
		}
		if info.Finished {
			lg.Info("restore: the job had already finished in this checkpoint: every task had ended its input; they finish at once, reading and emitting nothing",
				"job", name, "location", rc.restoreFrom, "checkpoint", info.CheckpointID)
		}
		jmCfg.Savepoint = sp
		jmCfg.Setup.Savepoint = rc.restoreFrom
		if build != nil {
			build.Savepoint = sp
		}
	}
	jm, err := jobmaster.NewDriver(jmCfg)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	if on.started != nil {
		on.started(jm)
	}
	for _, inj := range on.injections() {
		if inj.After > 0 {
			t := time.AfterFunc(inj.After, inj.Arm)
			defer t.Stop()
		}
	}
	if ln := e.cfg.MetricsListener; ln != nil || e.cfg.MetricsAddr != "" {
		if ln == nil {
			if ln, err = net.Listen("tcp", e.cfg.MetricsAddr); err != nil {
				return nil, fmt.Errorf("job %q: WithMetrics: %w", name, err)
			}
		}
		lg := cmp.Or(e.cfg.Logger, slog.Default())
		lg.Info("metrics", "job", name, "url", "http://"+ln.Addr().String()+"/metrics")
		ms := startMetrics(ln, name, func() *JobResult { return resultOf(name, jm.Snapshot()) }, on.taskManagers)
		defer func() {
			if err := ms.stop(); err != nil {
				lg.Warn("metrics server", "job", name, "err", err)
			}
		}()
	}
	var wg sync.WaitGroup
	stopProgress := make(chan struct{})
	if e.cfg.Progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(e.cfg.ProgressInterval)
			defer t.Stop()
			for {
				select {
				case <-t.C:
					e.cfg.Progress(resultOf(name, jm.Snapshot()))
				case <-stopProgress:
					return
				}
			}
		}()
	}
	snap := jm.Run(ctx)
	close(stopProgress)
	wg.Wait()
	if on.cluster {
		// What the TaskManagers' sinks built, merged into this build's accumulators (a join: the order and
		// repeats do not matter).
		for tm, values := range jm.Accumulators() {
			if err := e.mergeAccumulators(values); err != nil {
				e.logger().Error("accumulators of a TaskManager cannot be merged", "job", name, "taskmanager", tm, "err", err)
			}
		}
	}
	res := resultOf(name, snap)
	res.RestoredFrom = restored
	for i, inj := range rc.injections {
		if !slices.Contains(snap.FiredInjections, i) {
			// A test or demo that asked for a failure and got none proves less than it seems to.
			res.UnfiredInjections = append(res.UnfiredInjections, inj.Spec)
			e.logger().Warn("a failure injection never fired: the job ended before it was due", "job", name, "injection", inj.Spec)
		}
	}
	if e.cfg.Progress != nil {
		e.cfg.Progress(res)
	}
	if snap.Status == jobcore.StatusFailed {
		return res, fmt.Errorf("job %q failed: %w", name, snap.Err)
	}
	if rc.savepointDir != "" && snap.Status == jobcore.StatusCanceled && snap.Savepoint == "" {
		err := snap.SavepointErr
		if err == nil {
			err = errors.New("no savepoint was taken")
		}
		return res, fmt.Errorf("job %q: savepoint on stop: %w", name, err)
	}
	return res, nil
}

// syncInjections makes the failure injections of one subtask of vertex id agree with the job master's
// fired set before an attempt of it is built (cluster.JobBuild.SyncInjections).
func (p *prepared) syncInjections(id ident.VertexID, subtask int, fired []int) {
	v := p.jg.Vertex(id)
	if v == nil {
		return // ChainFor refuses the deployment
	}
	for _, inj := range p.rc.injections {
		if slices.ContainsFunc(v.Nodes, func(n *graph.StreamNode) bool { return inj.Targets(n.Name, subtask) }) {
			inj.SetFired(slices.Contains(fired, inj.Index))
		}
	}
}

// injections returns the failure injections whose timers this process arms: those of the operators its
// tasks run (none for TaskManagers in other processes, which arm their own).
func (on runOn) injections() []*operator.Injection {
	if on.chains == nil {
		return nil
	}
	return on.chains.rc.injections
}

// storageWord names checkpoint storage that a cluster cannot share.
func storageWord(loc string) string {
	if loc == "" {
		return "a per-process temporary directory"
	}
	return loc + " (memory of one process)"
}

// clusterStarted, when set (by tests, through export_test.go), is called with the mini-cluster of each job
// Execute runs, before the job starts, so that a test can watch the cluster's tables.
var clusterStarted func(*cluster.MiniCluster)

// checkInjections makes sure every failure injection names an operator and subtask of the job.
func checkInjections(jg *graph.JobGraph, injections []*operator.Injection) error {
	var errs []error
	for _, inj := range injections {
		v := jg.VertexByOperator(inj.Operator)
		if v == nil {
			var names []string
			for _, v := range jg.Vertices {
				for _, n := range v.Nodes {
					names = append(names, n.Name)
				}
			}
			errs = append(errs, fmt.Errorf("WithFailureInjection %q: no operator is named %q; the operators are %s", inj.Spec, inj.Operator, strings.Join(names, ", ")))
			continue
		}
		if inj.Subtask >= v.Parallelism {
			errs = append(errs, fmt.Errorf("WithFailureInjection %q: operator %q has parallelism %d, so subtasks 0 to %d", inj.Spec, inj.Operator, v.Parallelism, v.Parallelism-1))
		}
	}
	return errors.Join(errs...)
}

func resultOf(name string, s jobcore.Snapshot) *JobResult {
	r := &JobResult{Job: name, Status: string(s.Status), Failovers: []FailoverResult{}, Savepoint: s.Savepoint, Waiting: s.Waiting}
	if c := s.Checkpoints; c != nil {
		r.Checkpoints = &CheckpointCounts{Completed: c.Completed, Failed: c.Failed, Aborted: c.Aborted, LastCompletedID: c.LastCompletedID}
	}
	subtaskName := func(st ident.Subtask) string {
		for _, vs := range s.Vertices {
			if vs.Vertex.ID == st.Vertex {
				return fmt.Sprintf("%s[%d]", vs.Vertex.Name, st.Index)
			}
		}
		return st.String()
	}
	t := s.FailoverTotals
	r.FailoverTotals = FailoverTotals{Failovers: t.Failovers, Omitted: t.Omitted, RecordsLost: t.RecordsLost,
		RecordsDropped: t.RecordsDropped, BuffersDropped: t.BuffersDropped, PartialRecordsSkipped: t.PartialRecordsSkipped,
		RecordsReplayed: t.RecordsReplayed, DuplicatesDropped: t.DuplicatesDropped, Edges: []EdgeLossResult{}}
	vertexName := func(id ident.VertexID) string {
		for _, vs := range s.Vertices {
			if vs.Vertex.ID == id {
				return vs.Vertex.Name
			}
		}
		return fmt.Sprintf("v%d", id)
	}
	for _, e := range t.Edges {
		r.FailoverTotals.Edges = append(r.FailoverTotals.Edges, EdgeLossResult{From: vertexName(e.Producer), To: vertexName(e.Consumer),
			RecordsLost: e.RecordsLost, RecordsDropped: e.RecordsDropped, BuffersDropped: e.BuffersDropped,
			PartialRecordsSkipped: e.PartialRecordsSkipped})
	}
	for _, f := range s.Failovers {
		fr := FailoverResult{Failed: subtaskName(f.Failed), Strategy: f.Strategy, Fallback: f.Fallback, CheckpointRestored: f.CheckpointRestored, Restarted: []string{}, FailedAt: f.FailedAt}
		if f.Global {
			fr.Failed = "job"
		}
		fr.TaskManager = f.TaskManager
		for _, st := range f.FailedSubtasks {
			fr.FailedSubtasks = append(fr.FailedSubtasks, subtaskName(st))
		}
		if f.Cause != nil {
			fr.Cause = f.Cause.Error()
		}
		for _, st := range f.Restarted {
			fr.Restarted = append(fr.Restarted, subtaskName(st))
		}
		if !f.RecoveredAt.IsZero() {
			fr.RecoveryMillis = ceilMillis(f.RecoveredAt.Sub(f.FailedAt))
		}
		if !f.OutputAt.IsZero() {
			fr.OutageMillis = ceilMillis(f.OutputAt.Sub(f.FailedAt))
		}
		fr.RecordsLost, fr.RecordsDropped, fr.BuffersDropped, fr.PartialRecordsSkipped = f.RecordsLost, f.RecordsDropped, f.BuffersDropped, f.PartialRecordsSkipped
		for _, c := range f.Channels {
			fr.Channels = append(fr.Channels, ChannelLossResult{From: subtaskName(c.Producer), To: subtaskName(c.Consumer),
				RecordsLost: c.RecordsLost, RecordsDropped: c.RecordsDropped, BuffersDropped: c.BuffersDropped,
				PartialRecordsSkipped: c.PartialRecordsSkipped})
		}
		fr.RecordsReplayed, fr.DuplicatesDropped = f.RecordsReplayed, f.DuplicatesDropped
		for _, c := range f.Replay {
			fr.Replay = append(fr.Replay, ChannelReplayResult{From: subtaskName(c.Producer), To: subtaskName(c.Consumer),
				RecordsReplayed: c.RecordsReplayed, DuplicatesDropped: c.DuplicatesDropped})
		}
		r.Failovers = append(r.Failovers, fr)
	}
	if s.Err != nil {
		r.Error = s.Err.Error()
	}
	end := s.Ended
	if end.IsZero() {
		end = time.Now()
	}
	if !s.Started.IsZero() {
		r.WallMillis = end.Sub(s.Started).Milliseconds()
	}
	for _, vs := range s.Vertices {
		v := vs.Vertex
		vr := VertexResult{Name: v.Name, Parallelism: v.Parallelism, RecordsIn: vs.RecordsIn, RecordsOut: vs.RecordsOut,
			Inputs: []InputResult{}}
		for _, n := range v.Nodes {
			vr.Operators = append(vr.Operators, n.Name)
		}
		for _, in := range v.Inputs {
			vr.Inputs = append(vr.Inputs, InputResult{From: in.Source.Name, Pattern: in.Pattern.String()})
		}
		for _, st := range vs.Subtasks {
			sr := SubtaskResult{Index: st.Index, Attempt: st.Attempt, TaskManager: st.TaskManager,
				State: st.State.String(), RecordsIn: st.RecordsIn, RecordsOut: st.RecordsOut}
			if st.HasWatermark {
				w := st.Watermark
				sr.Watermark = &w
			}
			if len(st.Metrics) > 0 {
				sr.Metrics = make(map[string]int64, len(st.Metrics))
				for _, m := range st.Metrics {
					sr.Metrics[m.Name] = m.Value
				}
			}
			vr.Subtasks = append(vr.Subtasks, sr)
		}
		r.Vertices = append(r.Vertices, vr)
	}
	return r
}

// ceilMillis rounds d up to whole milliseconds: a recovery that took 0.3 ms is reported as 1 ms, not as 0,
// which would read as "not measured", and a figure is never lower than what happened.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
