// Package executor runs a compiled job: in an in-process mini-cluster (Execute), or on the TaskManagers of
// a JobManager's dispatcher (Run), and builds what a TaskManager of a cluster runs of it (TaskManagerBuild).
// It opens the job's checkpoint storage, checks and opens the state it restores, arms the failure
// injections, serves the job's metrics and progress, and merges what other processes' tasks accumulated.
//
// A Job is what the root package compiles from an Environment: the job graph, the operators (in its
// vertices' nodes), the validated recovery options and the runtime settings. The executor must not import
// the root package (the API a job author imports), nor decide anything the job master decides: it wires a
// job master driver to storage, TaskManagers and observers, and reports the driver's snapshots.
package executor

import (
	"cmp"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/cluster"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/rest"
	"github.com/runnel-dev/runnel/internal/scheduler"
	"github.com/runnel-dev/runnel/internal/task"
)

// Job is a job made ready to run: its options validated, its job graph chained, its failure injections
// checked against the graph. It is what running the job needs, in whichever process: Execute, the
// JobManager's submit handler, a TaskManager's job setup and a submitting client all start from one.
type Job struct {
	Name string
	// Args are the arguments a registered job was built from (nil for a job an Environment executes):
	// what every other process builds it from.
	Args []string
	// Graph is the chained job graph; its nodes hold this build's operators.
	Graph *graph.JobGraph
	// Fingerprint is graph.Fingerprint(Graph): two processes run the job together only when theirs agree.
	Fingerprint [32]byte
	Recovery    Recovery
	Settings    Settings
	// EncodeAccumulators and MergeAccumulators read and join the job's accumulators (the Environment's
	// table): a TaskManager sends what its tasks built, the JobManager and the client merge it.
	EncodeAccumulators func() (map[string][]byte, error)
	MergeAccumulators  func(values map[string][]byte) error
}

// Recovery is the validated form of a job's recovery options.
type Recovery struct {
	Checkpointing bool
	Checkpoint    checkpoint.Config
	// Storage is where checkpoints go ("": a temporary directory of this process).
	Storage    string
	Failover   scheduler.FailoverMode
	Restart    scheduler.RestartConfig
	Backend    string
	Injections []*operator.Injection
	// SavepointDir is where a savepoint is written when the job is stopped ("": none).
	SavepointDir string
	// RestoreFrom is the savepoint or checkpoint directory the job starts from ("": none).
	RestoreFrom string
	// AllowDropped lets a restore drop the state of operators the job no longer has.
	AllowDropped bool
	Incremental  bool
	Scheduling   scheduler.SchedulingMode
}

// Settings are the runtime settings of a job's run.
type Settings struct {
	BufferTimeout time.Duration
	MaxRecordSize int
	NoSlotSharing bool
	// NetworkBuffersPerChannel is the length of the network queues: the buffers an output subpartition
	// may fill and the credit of a remote input channel (0: task.DefaultCreditsPerChannel).
	NetworkBuffersPerChannel int
	// MiniCluster sizes the in-process cluster Execute starts; its Logger (nil: slog.Default()) and Clock
	// are the run's. SlotsPerTM 0 is just enough slots for the job.
	MiniCluster cluster.MiniClusterConfig
	// MetricsAddr, if set, is where the job's Prometheus metrics are served while it runs; MetricsListener
	// is the same on a listener the caller opened (closed when the run ends).
	MetricsAddr     string
	MetricsListener net.Listener
	// UIAddr, if set, is where the mini-cluster serves the run's REST API and web dashboard while it
	// runs; UIListener is the same on a listener the caller opened (closed when the run ends).
	UIAddr     string
	UIListener net.Listener
	// Progress, when set, is called with a snapshot of the running job every ProgressInterval, and with
	// the result at the end.
	ProgressInterval time.Duration
	Progress         func(*report.JobResult)
}

// Summary is the job's row of GET /v1/jobs, without its id, status and times.
func (j *Job) Summary() rest.JobSummary {
	s := rest.JobSummary{Name: j.Name, Failover: j.Recovery.Failover.String()}
	for _, v := range j.Graph.Vertices {
		s.Parallelism = max(s.Parallelism, v.Parallelism)
	}
	return s
}

// logger is the run's logger.
func (s *Settings) logger() *slog.Logger { return cmp.Or(s.MiniCluster.Logger, slog.Default()) }

// SameBuild returns nil when a build of job name has the fingerprint want, and otherwise the error that
// refuses it: the same arguments gave another graph, so the build function reads something else.
func SameBuild(name string, want, got [32]byte) error {
	if want == got {
		return nil
	}
	return fmt.Errorf("job %q: built from the same arguments, its job graph differs (fingerprint %x… here, %x… expected): "+
		"the job's build function depends on something other than its arguments (a clock, the host, randomness or a global variable); "+
		"make the job's shape a function of its arguments alone", name, got[:6], want[:6])
}

// CheckSharedStorage refuses a checkpointed job whose storage the processes of a cluster cannot share.
func (j *Job) CheckSharedStorage() error {
	loc := j.Recovery.Storage
	if !j.Recovery.Checkpointing || loc != "" && !strings.HasPrefix(loc, "mem://") {
		return nil
	}
	word := loc + " (memory of one process)"
	if loc == "" {
		word = "a per-process temporary directory"
	}
	return fmt.Errorf("job %q: checkpointing on a cluster needs --checkpoint-storage naming storage that every process reaches (a shared directory or s3://); %s cannot be", j.Name, word)
}

// chainFor returns the factory of the operators of vertex id from this build, with this build's failure
// injections. id is a vertex of any build with the same fingerprint: the vertices are the same, the
// operator objects (and what sinks write into) are this build's.
func (j *Job) chainFor(id ident.VertexID) (task.ChainFactory, error) {
	v := j.Graph.Vertex(id)
	if v == nil {
		return nil, fmt.Errorf("job %q has no vertex %d", j.Name, id)
	}
	return operator.ChainFactory(v, j.Recovery.Injections), nil
}

// SyncInjections makes the failure injections of one subtask of vertex id agree with the job master's
// fired set before an attempt of it is built (cluster.JobBuild.SyncInjections).
func (j *Job) SyncInjections(id ident.VertexID, subtask int, fired []int) {
	v := j.Graph.Vertex(id)
	if v == nil {
		return // ChainFor refuses the deployment
	}
	for _, inj := range j.Recovery.Injections {
		if slices.ContainsFunc(v.Nodes, func(n *graph.StreamNode) bool { return inj.Targets(n.Name, subtask) }) {
			inj.SetFired(slices.Contains(fired, inj.Index))
		}
	}
}
