package executor

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/jobcore"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/metrics"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/report"
)

// On says where Run runs a job: the dispatcher of its TaskManagers, and for the mini-cluster the catalog
// through which they take the job's operators (chains) and storage from this process.
type On struct {
	Dispatcher *jobmaster.Dispatcher
	// Cluster marks TaskManagers in other processes: checkpoint storage must be shared, and the
	// accumulators their tasks built are merged into the job's at the end.
	Cluster bool
	// SlotWait bounds the job's wait for slots (0: the job master's default).
	SlotWait time.Duration
	// Started, when set, is called with the driver before the job starts (the JobManager's table of jobs).
	Started func(*jobmaster.Driver)
	// JobID is the id of the job's run (zero: a random one).
	JobID protocol.JobID
	// Committed, when set, is called with each checkpoint's id and storage location after its metadata is
	// committed and before it counts as completed; its error fails the checkpoint (jobmaster.Config).
	Committed func(ctx context.Context, id int64, location string) error
	// Adopt, when set, takes over a run whose tasks a lost leader's TaskManagers kept running (JobID is
	// the run's id): nothing is deployed, and the job's restore point is read as Takeover says.
	Adopt *Takeover
	// Resumed, when set, says the run restarts a job whose leader was lost: its failovers begin with it.
	Resumed *jobmaster.Resumed
	// Throughput, when set, is sampled every report.ThroughputInterval while the job runs.
	Throughput *report.Throughput

	requireSlots bool
	catalog      *inProcessCatalog
	chains       *Job
	// taskManagers are the mini-cluster's TaskManagers, whose in-flight logs the job's metrics show.
	taskManagers []*cluster.TaskManager
}

// ErrLeftRunning, as the cause of the end of a run's context, says that the run's tasks keep running for
// another JobManager to take over (a leader stopping under high availability with task continuity): the
// run ends here, but nothing of its sinks is settled.
var ErrLeftRunning = errors.New("the job's tasks keep running for the next leader")

// Takeover is what a JobManager knows of a run it takes over from a lost leader.
type Takeover struct {
	// Core is the core's adoption, without Completed, which Run reads from the storage.
	Core *jobcore.Adoption
	// Secret and Start are the run's, as its TaskManagers have them; Savepoint is the location the run
	// started from ("" none), Restored the id of the checkpoint it restored there (0 none).
	Secret    []byte
	Start     time.Time
	Savepoint string
	Restored  int64
	// ThisRun is the newest completed checkpoint the run took (0: none), in the job's checkpoint storage.
	ThisRun int64
}

// undo is what a run opened and must release when it returns, released last first.
type undo []func()

func (u *undo) push(f func()) { *u = append(*u, f) }

// run releases everything pushed so far. Its receiver is a pointer so that `defer u.run()` releases
// what is pushed after the defer statement too.
func (u *undo) run() {
	for _, f := range slices.Backward(*u) {
		f()
	}
}

// Run runs job on the TaskManagers of on and blocks until it ends: FINISHED when every source ended and
// all records were processed, FAILED when a task failed (the error names the subtask), CANCELED when ctx
// was cancelled first. The result is returned in every case where the job ran; err is non-nil unless the
// job finished or was cancelled.
func Run(ctx context.Context, job *Job, on On) (*report.JobResult, error) {
	var release undo
	defer release.run()
	name, rc := job.Name, &job.Recovery
	build := on.jobBuild(job)
	jmCfg := jobmaster.Config{
		Job: job.Graph, JobID: on.JobID, Dispatcher: on.Dispatcher, RequireSlots: on.requireSlots, CollectAccumulators: on.Cluster, SlotWaitTimeout: on.SlotWait,
		Setup:         protocol.SetupJob{Args: job.Args, Graph: job.Fingerprint},
		BufferTimeout: job.Settings.BufferTimeout, MaxRecordSize: job.Settings.MaxRecordSize, Logger: job.Settings.MiniCluster.Logger,
		Failover: rc.Failover, Restart: rc.Restart, StateBackend: rc.Backend, Scheduling: rc.Scheduling,
		NoSlotSharing: job.Settings.NoSlotSharing, SavepointOnStop: rc.SavepointDir, Resumed: on.Resumed,
		CreditsPerChannel: job.Settings.NetworkBuffersPerChannel,
	}
	if on.Cluster {
		if err := job.CheckSharedStorage(); err != nil {
			return nil, err
		}
	}
	if rc.Checkpointing {
		st, err := job.openStorage(ctx, on.Cluster, &jmCfg.Setup, &release)
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", name, err)
		}
		cc := rc.Checkpoint
		jmCfg.Checkpoint, jmCfg.Storage = &cc, st
		if hook := on.Committed; hook != nil {
			loc := jmCfg.Setup.CheckpointStorage
			jmCfg.Committed = func(ctx context.Context, id int64) error { return hook(ctx, id, loc) }
		}
		if build != nil {
			build.Store = st
		}
	}
	var restored *report.RestoreResult
	if a := on.Adopt; a != nil {
		sp, err := a.restorePoint(ctx, jmCfg.Setup.CheckpointStorage)
		if err != nil {
			return nil, fmt.Errorf("job %q: take over its tasks: %w", name, err)
		}
		core := *a.Core
		if sp != nil {
			release.push(func() { _ = sp.Close() })
			jmCfg.Savepoint = sp
			core.Completed, core.CompletedThisRun = sp.Checkpoint, a.ThisRun > 0
		}
		jmCfg.Setup.Savepoint = a.Savepoint
		jmCfg.Adopt = &jobmaster.Adoption{Core: &core, Secret: a.Secret, Start: a.Start}
	} else if rc.RestoreFrom != "" {
		sp, info, err := job.restore(ctx)
		if err != nil {
			return nil, fmt.Errorf("job %q: restore from savepoint %s: %w", name, rc.RestoreFrom, err)
		}
		release.push(func() { _ = sp.Close() })
		restored = info
		jmCfg.Savepoint = sp
		jmCfg.Setup.Savepoint = rc.RestoreFrom
		if build != nil {
			build.Savepoint = sp
		}
	}
	jm, err := jobmaster.NewDriver(jmCfg)
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", name, err)
	}
	if on.Started != nil {
		on.Started(jm)
	}
	for _, inj := range on.injections() {
		if inj.After > 0 {
			t := time.AfterFunc(inj.After, inj.Arm)
			release.push(func() { t.Stop() })
		}
	}
	if err := job.serveMetrics(jm, on.taskManagers, &release); err != nil {
		return nil, fmt.Errorf("job %q: WithMetrics: %w", name, err)
	}
	stopProgress := job.reportProgress(jm)
	stopSampling := job.sampleThroughput(jm, on.Throughput)
	snap := jm.Run(ctx)
	stopSampling()
	stopProgress()
	if rc.Checkpointing && !errors.Is(context.Cause(ctx), ErrLeftRunning) {
		rp := snap.RestorePoint
		settle(ctx, settleTargets(snap), rp, blobReader(rp, jmCfg.Storage, jmCfg.Savepoint), job.Settings.logger().With("job", name))
	}
	return job.result(snap, jm, on.Cluster, restored)
}

// openStorage opens the job's checkpoint storage (a temporary directory of this process when none is
// named) and sets it in setup. For TaskManagers in other processes (shared) a probe written to it proves
// that each reaches it: every TaskManager reads it back before it runs the job.
func (j *Job) openStorage(ctx context.Context, shared bool, setup *protocol.SetupJob, release *undo) (*checkpoint.Storage, error) {
	loc := j.Recovery.Storage
	if loc == "" {
		dir, err := os.MkdirTemp("", "runnel-checkpoints-")
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage: %w", err)
		}
		release.push(func() { _ = os.RemoveAll(dir) })
		loc = dir
	}
	st, err := checkpoint.Open(ctx, loc)
	if err != nil {
		return nil, fmt.Errorf("CheckpointConfig.Storage: %w", err)
	}
	release.push(func() { _ = st.Close() })
	setup.CheckpointStorage = loc
	if !shared {
		return st, nil
	}
	probe, nonce := make([]byte, 8), make([]byte, 16)
	_, _ = cryptorand.Read(probe)
	_, _ = cryptorand.Read(nonce)
	setup.Probe, setup.ProbeNonce = hex.EncodeToString(probe), nonce
	if err := st.WriteProbe(ctx, setup.Probe, nonce); err != nil {
		return nil, fmt.Errorf("CheckpointConfig.Storage: %w", err)
	}
	release.push(func() { _ = st.DeleteProbe(context.Background(), setup.Probe) })
	return st, nil
}

// serveMetrics serves the job's metrics (and those of the in-process TaskManagers tms) while it runs, when
// the settings ask for it.
func (j *Job) serveMetrics(jm *jobmaster.Driver, tms []*cluster.TaskManager, release *undo) error {
	ln := j.Settings.MetricsListener
	if ln == nil && j.Settings.MetricsAddr == "" {
		return nil
	}
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", j.Settings.MetricsAddr); err != nil {
			return err
		}
	}
	lg := j.Settings.logger()
	lg.Info("metrics", "job", j.Name, "url", "http://"+ln.Addr().String()+"/metrics")
	ms := metrics.ServeJob(ln, j.Name, func() *report.JobResult { return report.Of(j.Name, jm.Snapshot()) }, tms)
	release.push(func() {
		if err := ms.Stop(); err != nil {
			lg.Warn("metrics server", "job", j.Name, "err", err)
		}
	})
	return nil
}

// reportProgress calls the settings' Progress with a snapshot of the running job every ProgressInterval,
// from a goroutine that the returned function stops and waits for.
func (j *Job) reportProgress(jm *jobmaster.Driver) (stop func()) {
	progress := j.Settings.Progress
	if progress == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(j.Settings.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				progress(report.Of(j.Name, jm.Snapshot()))
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// sampleThroughput adds the running job's result to tp every report.ThroughputInterval, from a goroutine
// that the returned function stops and waits for (nothing when tp is nil).
func (j *Job) sampleThroughput(jm *jobmaster.Driver, tp *report.Throughput) (stop func()) {
	if tp == nil {
		return func() {}
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(report.ThroughputInterval)
		defer t.Stop()
		tp.Add(time.Now(), report.Of(j.Name, jm.Snapshot()))
		for {
			select {
			case now := <-t.C:
				tp.Add(now, report.Of(j.Name, jm.Snapshot()))
			case <-done:
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// result makes the result of the ended run: it merges what the TaskManagers of a cluster accumulated,
// lists the failure injections that never fired, and gives the result to Progress a last time.
func (j *Job) result(snap jobcore.Snapshot, jm *jobmaster.Driver, cluster bool, restored *report.RestoreResult) (*report.JobResult, error) {
	name, lg := j.Name, j.Settings.logger()
	if cluster {
		// What the TaskManagers' sinks built, merged into this build's accumulators (a join: the order and
		// repeats do not matter).
		for tm, values := range jm.Accumulators() {
			if err := j.MergeAccumulators(values); err != nil {
				lg.Error("accumulators of a TaskManager cannot be merged", "job", name, "taskmanager", tm, "err", err)
			}
		}
	}
	res := report.Of(name, snap)
	res.RestoredFrom = restored
	for i, inj := range j.Recovery.Injections {
		if !slices.Contains(snap.FiredInjections, i) {
			// A test or demo that asked for a failure and got none proves less than it seems to.
			res.UnfiredInjections = append(res.UnfiredInjections, inj.Spec)
			lg.Warn("a failure injection never fired: the job ended before it was due", "job", name, "injection", inj.Spec)
		}
	}
	if j.Settings.Progress != nil {
		j.Settings.Progress(res)
	}
	if snap.Status == jobcore.StatusFailed {
		return res, fmt.Errorf("job %q failed: %w", name, snap.Err)
	}
	if j.Recovery.SavepointDir != "" && snap.Status == jobcore.StatusCanceled && snap.Savepoint == "" {
		err := snap.SavepointErr
		if err == nil {
			err = errors.New("no savepoint was taken")
		}
		return res, fmt.Errorf("job %q: savepoint on stop: %w", name, err)
	}
	return res, nil
}

// injections returns the failure injections whose timers this process arms: those of the operators its
// tasks run (none for TaskManagers in other processes, which arm their own).
func (on On) injections() []*operator.Injection {
	if on.chains == nil {
		return nil
	}
	return on.chains.Recovery.Injections
}
