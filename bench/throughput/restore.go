package throughput

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/runnel-dev/runnel"
)

// RestoreConfig configures RunRestore: the backpressured pipeline of RunBackpressure with unaligned
// checkpoints, in which sum[0] fails at its first record after it heard that checkpoint FailAtCheckpoint
// completed (runnel.WithFailureInjection "sum[0]@chk-N"), under region failover, so that the job
// restores a checkpoint whose channel state holds the full queues. The Modes of the embedded
// BackpressureConfig are not used.
type RestoreConfig struct {
	BackpressureConfig
	// FailAtCheckpoint is the checkpoint after which sum[0] fails (default 3: at the default rates the
	// queues are full from the second checkpoint on, 64 buffers per channel included).
	FailAtCheckpoint int
	// Dir is the directory under which each run's checkpoint storage and the baseline's file go (default
	// the system's temporary directory), so that both are on one filesystem.
	Dir string
	// Window is how long the restarted sinks must take records at RecoveredFraction of their pace for
	// their throughput to count as back (default 100 ms and 0.9).
	Window            time.Duration
	RecoveredFraction float64
}

// RestoreResult holds the figures of RunRestore, one RestoreQueue per network queue length.
type RestoreResult struct {
	SinkRate         float64 `json:"sink_rate"`
	SourceRate       float64 `json:"source_rate"`
	Parallelism      int     `json:"parallelism"`
	IntervalMillis   int64   `json:"checkpoint_interval_ms"`
	BufferSize       int     `json:"buffer_size"`
	FailAtCheckpoint int     `json:"fail_at_checkpoint"`
	// Dir is where the checkpoints and the baseline's file were written; ReadBaseline says how the
	// baseline reads.
	Dir          string         `json:"dir"`
	ReadBaseline string         `json:"read_baseline"`
	Queues       []RestoreQueue `json:"queues"`
}

// RestoreQueue holds the medians over the runs at one network queue length, and the runs.
type RestoreQueue struct {
	BuffersPerChannel int `json:"buffers_per_channel"`
	// RestoredChannelStateBytes and RestoredStateBytes are the restored checkpoint's sizes: its channel
	// state, and every byte of state it refers to, channel state included.
	RestoredChannelStateBytes int64 `json:"restored_channel_state_bytes"`
	RestoredStateBytes        int64 `json:"restored_state_bytes"`
	// RecoveryMillis and OutageMillis are the failover's (runnel.FailoverResult): from the failure until
	// every restarted subtask runs again, its state and channel state read, and until the restarted sinks
	// took a record again.
	RecoveryMillis float64 `json:"recovery_ms"`
	OutageMillis   float64 `json:"outage_ms"`
	// SinkRecoveredMillis runs from the failure until the restarted sinks take records at
	// RecoveredFraction of their pace, over a Window from then on.
	SinkRecoveredMillis float64 `json:"sink_throughput_recovered_ms"`
	// ReadMillis is how long reading RestoredStateBytes from a file on the checkpoints' filesystem takes,
	// just after writing it: from the page cache, not the disk. ReadMBPerS is its rate.
	ReadMillis float64 `json:"page_cache_read_ms"`
	ReadMBPerS float64 `json:"page_cache_read_mb_per_s"`
	// RecoveryReadRatio is RecoveryMillis over ReadMillis, OutageReadRatio OutageMillis over it.
	RecoveryReadRatio float64      `json:"recovery_to_read_ratio"`
	OutageReadRatio   float64      `json:"outage_to_read_ratio"`
	Runs              []RestoreRun `json:"runs"`
}

// RestoreRun is one run of RunRestore.
type RestoreRun struct {
	CheckpointRestored        int64   `json:"checkpoint_restored"`
	RestoredChannelStateBytes int64   `json:"restored_channel_state_bytes"`
	RestoredStateBytes        int64   `json:"restored_state_bytes"`
	RecoveryMillis            int64   `json:"recovery_ms"`
	OutageMillis              int64   `json:"outage_ms"`
	SinkRecoveredMillis       float64 `json:"sink_throughput_recovered_ms"`
	ReadMillis                float64 `json:"page_cache_read_ms"`
	// ChannelStateBytesByCheckpoint lists the channel state of every completed checkpoint, in order, to
	// show whether the queues had filled by the restored one.
	ChannelStateBytesByCheckpoint []int64 `json:"channel_state_bytes_by_checkpoint"`
	WallMillis                    int64   `json:"wall_ms"`
}

func (cfg *RestoreConfig) defaults() error {
	if cfg.FailAtCheckpoint == 0 {
		cfg.FailAtCheckpoint = 3
	}
	if cfg.MaxDuration == 0 {
		cfg.MaxDuration = time.Minute
	}
	if cfg.Window == 0 {
		cfg.Window = 100 * time.Millisecond
	}
	if cfg.RecoveredFraction == 0 {
		cfg.RecoveredFraction = 0.9
	}
	if cfg.Dir == "" {
		cfg.Dir = os.TempDir()
	}
	cfg.Modes = []string{Unaligned}
	err := cfg.BackpressureConfig.defaults()
	if cfg.FailAtCheckpoint < 1 || cfg.Window < 0 || cfg.RecoveredFraction <= 0 || cfg.RecoveredFraction > 1 {
		err = errors.Join(err, fmt.Errorf("throughput: fail at checkpoint %d, window %s, recovered fraction %v: at least 1, positive, in (0, 1]",
			cfg.FailAtCheckpoint, cfg.Window, cfg.RecoveredFraction))
	}
	return err
}

// RunRestore runs the backpressured pipeline with unaligned checkpoints and one injected failure, Runs
// times at each network queue length, and reports how long the restore of the checkpoint and its
// channel state took, against reading as many bytes from a file on the same filesystem.
func RunRestore(ctx context.Context, cfg RestoreConfig) (*RestoreResult, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	res := &RestoreResult{SinkRate: cfg.SinkRate, SourceRate: cfg.SinkRate * cfg.SourceFactor, Parallelism: cfg.Parallelism,
		IntervalMillis: cfg.Interval.Milliseconds(), BufferSize: cfg.BufferSize, FailAtCheckpoint: cfg.FailAtCheckpoint, Dir: cfg.Dir,
		ReadBaseline: "a file of restored_state_bytes written to dir and read back at once: a page-cache read, nothing dropped from the cache"}
	for _, buffers := range cfg.BuffersPerChannel {
		q := RestoreQueue{BuffersPerChannel: buffers, Runs: []RestoreRun{}}
		for range cfg.Runs {
			run, err := runRestore(ctx, cfg, buffers)
			if err != nil {
				return nil, err
			}
			q.Runs = append(q.Runs, *run)
		}
		q.summarize()
		res.Queues = append(res.Queues, q)
	}
	return res, nil
}

func (q *RestoreQueue) summarize() {
	col := func(f func(RestoreRun) float64) float64 {
		xs := make([]float64, len(q.Runs))
		for i, r := range q.Runs {
			xs[i] = f(r)
		}
		return medianOf(xs)
	}
	q.RestoredChannelStateBytes = int64(col(func(r RestoreRun) float64 { return float64(r.RestoredChannelStateBytes) }))
	q.RestoredStateBytes = int64(col(func(r RestoreRun) float64 { return float64(r.RestoredStateBytes) }))
	q.RecoveryMillis = col(func(r RestoreRun) float64 { return float64(r.RecoveryMillis) })
	q.OutageMillis = col(func(r RestoreRun) float64 { return float64(r.OutageMillis) })
	q.SinkRecoveredMillis = col(func(r RestoreRun) float64 { return r.SinkRecoveredMillis })
	q.ReadMillis = col(func(r RestoreRun) float64 { return r.ReadMillis })
	if q.ReadMillis > 0 {
		q.ReadMBPerS = float64(q.RestoredStateBytes) / 1e6 / (q.ReadMillis / 1e3)
		q.RecoveryReadRatio = q.RecoveryMillis / q.ReadMillis
		q.OutageReadRatio = q.OutageMillis / q.ReadMillis
	}
}

// runRestore runs the job once at buffers per channel until the restarted sinks' throughput is back.
func runRestore(ctx context.Context, cfg RestoreConfig, buffers int) (*RestoreRun, error) {
	p := cfg.Parallelism
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	dir, err := os.MkdirTemp(cfg.Dir, "runnel-restore-bench-")
	if err != nil {
		return nil, fmt.Errorf("throughput: %w", err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, cfg.MaxDuration)
	defer cancel()

	sink := &pacedSink{rate: cfg.SinkRate, parallelism: p}
	pace := cfg.RecoveredFraction * cfg.SinkRate * float64(p)
	watch := newRecoveryWatch(sink, pace, cfg.Window, cancel)
	defer watch.stop()

	opts := []runnel.Option{runnel.WithParallelism(p), runnel.WithTaskManagers(1), runnel.WithLogger(logger),
		runnel.WithBufferTimeout(100 * time.Millisecond), runnel.WithNetworkBuffersPerChannel(buffers),
		runnel.WithBufferSize(cfg.BufferSize), runnel.WithFailover("region"),
		runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=0s"),
		runnel.WithFailureInjection(fmt.Sprintf("sum[0]@chk-%d", cfg.FailAtCheckpoint)),
		runnel.WithCheckpointing(runnel.CheckpointConfig{Interval: cfg.Interval, Unaligned: true,
			AlignedCheckpointTimeout: cfg.AlignedCheckpointTimeout, Storage: filepath.Join(dir, "chk"),
			Timeout: max(10*time.Minute, 2*cfg.MaxDuration)})}
	env := runnel.NewEnvironment(opts...)
	backpressuredJob(env, cfg.BackpressureConfig, sink)
	res, err := env.Execute(ctx, "restore")
	watch.stop()
	if err != nil {
		return nil, fmt.Errorf("throughput: restore, %d buffers per channel: %w", buffers, err)
	}
	if len(res.Failovers) != 1 || res.Failovers[0].CheckpointRestored == nil {
		return nil, fmt.Errorf("throughput: restore, %d buffers per channel: want one failover that restored a checkpoint, got %d (job %s, unfired injections %v)",
			buffers, len(res.Failovers), res.Status, res.UnfiredInjections)
	}
	f := res.Failovers[0]
	back := watch.recoveredAt()
	if back.IsZero() {
		return nil, fmt.Errorf("throughput: restore, %d buffers per channel: the sinks' throughput was not back within %s (job %s)", buffers, cfg.MaxDuration, res.Status)
	}
	run := &RestoreRun{CheckpointRestored: *f.CheckpointRestored, RecoveryMillis: f.RecoveryMillis, OutageMillis: f.OutageMillis,
		SinkRecoveredMillis: float64(back.Sub(f.FailedAt).Microseconds()) / 1e3, WallMillis: res.WallMillis, ChannelStateBytesByCheckpoint: []int64{}}
	for _, st := range res.CheckpointHistory {
		if st.Status != "COMPLETED" {
			continue
		}
		run.ChannelStateBytesByCheckpoint = append(run.ChannelStateBytesByCheckpoint, st.ChannelStateBytes)
		if st.ID == run.CheckpointRestored {
			run.RestoredChannelStateBytes, run.RestoredStateBytes = st.ChannelStateBytes, st.StateBytes
		}
	}
	if run.RestoredStateBytes == 0 {
		return nil, fmt.Errorf("throughput: restore: no statistics of the restored checkpoint %d", run.CheckpointRestored)
	}
	if run.ReadMillis, err = pageCacheRead(dir, run.RestoredStateBytes); err != nil {
		return nil, err
	}
	return run, nil
}

// pageCacheRead writes a file of n bytes in dir and reads it back three times, returning the median
// read's milliseconds: the file stays in the page cache, so this is the rate of a read that does not
// reach the disk, the floor of any restore of n bytes.
func pageCacheRead(dir string, n int64) (float64, error) {
	path := filepath.Join(dir, "read-baseline")
	f, err := os.Create(path)
	if err != nil {
		return 0, fmt.Errorf("throughput: read baseline: %w", err)
	}
	defer os.Remove(path)
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i * 131)
	}
	for left := n; left > 0; left -= int64(len(block)) {
		if _, err := f.Write(block[:min(left, int64(len(block)))]); err != nil {
			f.Close()
			return 0, fmt.Errorf("throughput: read baseline: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("throughput: read baseline: %w", err)
	}
	var ms []float64
	for range 3 {
		start := time.Now()
		f, err := os.Open(path)
		if err != nil {
			return 0, fmt.Errorf("throughput: read baseline: %w", err)
		}
		got, err := io.CopyBuffer(io.Discard, onlyReader{f}, block)
		f.Close()
		if err != nil || got != n {
			return 0, fmt.Errorf("throughput: read baseline: read %d of %d bytes: %v", got, n, err)
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1e3)
	}
	return medianOf(ms), nil
}

// onlyReader hides the file's WriterTo, so that the copy reads through the buffer as a restore does.
type onlyReader struct{ io.Reader }

// recoveryWatch samples the records the restarted sink writers took, and notes when they first took
// them at pace over a window; then it ends the run.
type recoveryWatch struct {
	sink   *pacedSink
	pace   float64 // records per second
	window time.Duration
	end    func()

	done     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	at       time.Time
}

type watchSample struct {
	at time.Time
	n  int64
}

// watchTick is how often the watch samples: a tenth of the default window.
const watchTick = 10 * time.Millisecond

func newRecoveryWatch(sink *pacedSink, pace float64, window time.Duration, end func()) *recoveryWatch {
	w := &recoveryWatch{sink: sink, pace: pace, window: window, end: end, done: make(chan struct{})}
	w.wg.Add(1)
	go w.loop()
	return w
}

func (w *recoveryWatch) loop() {
	defer w.wg.Done()
	tick := time.NewTicker(watchTick)
	defer tick.Stop()
	var samples []watchSample
	next := 0 // the earliest sample that may start a window at pace
	for {
		select {
		case <-w.done:
			return
		case <-tick.C:
		}
		if w.sink.restartedFirst.Load() == 0 {
			continue
		}
		samples = append(samples, watchSample{at: time.Now(), n: w.sink.restarted.Load()})
		// Each sample that has a whole window after it starts a window: the first at pace is the end of
		// the recovery.
		for e := next + 1; e < len(samples); e++ {
			s := samples[next]
			d := samples[e].at.Sub(s.at)
			if d < w.window {
				continue
			}
			if float64(samples[e].n-s.n)/d.Seconds() >= w.pace {
				w.mu.Lock()
				w.at = s.at
				w.mu.Unlock()
				w.end()
				return
			}
			next++
		}
	}
}

func (w *recoveryWatch) stop() {
	w.stopOnce.Do(func() { close(w.done) })
	w.wg.Wait()
}

// recoveredAt is the start of the first window at pace (zero: none).
func (w *recoveryWatch) recoveredAt() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.at
}
