// Package deploy holds what passes between the job master and a task attempt, as plain data: the
// descriptor of an attempt (which subtask it runs, the partitions it writes, the channels it reads, the
// state it restores) and what the attempt reports back (its lifecycle state, its observations, its
// metrics, the errors the job master tells apart).
//
// The job master's pure core (internal/jobcore), the wire conversions (internal/rpc) and the task runtime
// (internal/task) share these types; keeping them here lets the core describe a deployment without
// importing the runtime that carries it out. The package holds types and their trivial methods only: it
// must not import the task runtime, the network stack or anything that runs, and it decides nothing.
package deploy

import (
	"context"
	"fmt"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/ident"
)

// Info describes the subtask to its operators.
type Info struct {
	JobName        string
	VertexName     string
	Attempt        ident.Attempt
	Parallelism    int
	MaxParallelism int
	TaskManager    string
}

// Name formats the subtask as people read it: "tokenize -> count [1/2] #0".
func (i Info) Name() string {
	return fmt.Sprintf("%s [%d/%d] #%d", i.VertexName, i.Attempt.Index+1, i.Parallelism, i.Attempt.Number)
}

const (
	// JobIDSize is the length of a job id on the wire (network.JobIDSize; the assignments between the two
	// array types do not compile if the sizes differ).
	JobIDSize = 16
	// CredentialSize is the length of a partition credential (network.CredentialSize).
	CredentialSize = 32
)

// OutputSpec describes one result partition the task produces.
type OutputSpec struct {
	Result        ident.ResultID
	Subpartitions int
	Reconnectable bool
	// Blocking partitions are spilled and consumable once the producer finished.
	Blocking bool
	// Logged partitions (task failover) keep an in-flight log per subpartition in Env.LogBudget.
	Logged bool
}

// ChannelSpec describes one input channel: which subpartition of which partition, and where it lives.
type ChannelSpec struct {
	Partition    ident.PartitionID
	Subpartition int
	// Local channels read from this TaskManager's partition manager; others connect to Address.
	Local   bool
	Address string
	// Job and Credential go into a remote channel's partition request: the job the consumer belongs to and
	// what the job master issued to this consumer attempt for this subpartition (network.PartitionCredential),
	// which the producer's TaskManager checks before it serves anything.
	Job        [JobIDSize]byte
	Credential [CredentialSize]byte
}

// InputSpec lists the channels of one input edge, in channel order.
type InputSpec struct {
	Channels []ChannelSpec
}

// RestoreSpec is the state a task starts from.
type RestoreSpec struct {
	CheckpointID int64
	Handle       checkpoint.StateHandle
	// RescaledFrom, when not zero, is the parallelism the vertex had in the checkpoint, and Parts replaces
	// Handle: the states of the old subtasks whose key groups overlap this subtask's. Only keyed state can be
	// restored so (each part is filtered to this subtask's key groups); other state cannot be split.
	RescaledFrom int
	Parts        []checkpoint.StateHandle
	// SameRun says the checkpoint was taken in this run of the job (not a savepoint or a checkpoint of an
	// earlier run): only then do the input channels' recorded positions belong to producer attempts that
	// can still be read, and only then are they restored (they measure approximate recovery's loss).
	SameRun bool
	// Read reads the state blobs; nil means the checkpoint storage (a savepoint brings its own).
	Read func(ctx context.Context, ref checkpoint.BlobRef) ([]byte, error)
	// Reads, when not empty, replaces Handle, RescaledFrom and Parts: the job is restored into other
	// vertices than the checkpoint's (operators chained otherwise, added or removed), and each read names
	// the operators whose state this subtask takes from one old subtask. The task's own entries (channel
	// positions, the watermark floor, the end of input) are combined over the reads: positions are dropped,
	// the lowest floor holds, and the input had ended only if it had in every read.
	Reads []StateRead
}

// StateRead is one old subtask's state that a re-mapped subtask takes part of.
type StateRead struct {
	Handle checkpoint.StateHandle
	// Operators are the uids of the operators whose entries this subtask takes from the handle's blobs.
	Operators []string
	// RescaledFrom, when not zero, is the parallelism the operators' old vertex had: the handle is then
	// one of that vertex's subtasks, each of which is read, and the operators' keyed state is filtered to
	// this subtask's key groups.
	RescaledFrom int
}
