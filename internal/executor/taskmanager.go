package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/protocol"
)

// TaskManagerBuild is what a TaskManager of a cluster runs of job, this process's build of a job the
// JobManager set up: its operators and accumulators, the checkpoint storage the JobManager named (checked
// by its probe to be the JobManager's), the savepoint it restores, and the timers of its time-based failure
// injections on the job's clock. The build's Close releases them.
func TaskManagerBuild(ctx context.Context, job *Job, setup protocol.SetupJob, lg *slog.Logger) (b *cluster.JobBuild, err error) {
	var closers []func() error
	defer func() {
		if err != nil {
			for _, f := range closers {
				_ = f()
			}
		}
	}()
	b = &cluster.JobBuild{ChainFor: job.chainFor, Incremental: job.Recovery.Incremental, Accumulators: job.EncodeAccumulators,
		SyncInjections: job.SyncInjections}
	if setup.CheckpointStorage != "" {
		st, err := checkpoint.Open(ctx, setup.CheckpointStorage)
		if err != nil {
			return nil, fmt.Errorf("checkpoint storage %s: %w", setup.CheckpointStorage, err)
		}
		closers = append(closers, st.Close)
		if setup.Probe != "" {
			if err := st.CheckProbe(ctx, setup.Probe, setup.ProbeNonce); err != nil {
				return nil, fmt.Errorf("checkpoint storage %s is not the one the JobManager writes (every process of a cluster must reach the same directory or bucket; a relative path is relative to each process's working directory): %w",
					setup.CheckpointStorage, err)
			}
		}
		b.Store = st
	}
	if setup.Savepoint != "" {
		sp, _, err := openRestore(ctx, setup.Savepoint, lg)
		if err != nil {
			return nil, fmt.Errorf("restore from savepoint %s: %w", setup.Savepoint, err)
		}
		closers = append(closers, sp.Close)
		b.Savepoint = sp
	}
	// Time-based failure injections fire on the job's clock, which started on the JobManager.
	start := time.Unix(0, setup.Start)
	for _, inj := range job.Recovery.Injections {
		if inj.After > 0 {
			t := time.AfterFunc(max(time.Until(start.Add(inj.After)), 0), inj.Arm)
			closers = append(closers, func() error { t.Stop(); return nil })
		}
	}
	b.Close = func() error {
		var errs []error
		for _, f := range closers {
			errs = append(errs, f())
		}
		return errors.Join(errs...)
	}
	return b, nil
}
