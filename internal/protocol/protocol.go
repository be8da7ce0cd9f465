// Package protocol is the plain-data contract between a JobManager and its TaskManagers: the envelope every
// message travels in, the session's own messages (registration, heartbeats) and the job-level messages that
// the job-master core does not define (the job's setup and release, accumulators). The job-level messages
// the core does define are its own: jobcore's message bodies go to a TaskManager, and a TaskManager answers
// with jobcore's events (TaskUpdate, Observation, CheckpointAck, CheckpointDecline, Counters,
// SubpartitionsSampled, JobSetUp, TaskManagerAlive).
//
// Everything a Body holds can cross a process: no closure, no channel; an error crosses as its text (see
// internal/rpc, which marshals every Body with protobuf, also between the ends of an in-process Pipe).
//
// It owns no goroutine, socket or clock, and imports only jobcore, whose KeptTask a registration carries.
package protocol

import (
	"encoding/hex"
	"errors"
	"time"

	"github.com/runnel-dev/runnel/internal/jobcore"
)

// Version is the version of the contract; a TaskManager that registers with another is refused.
const Version = 1

// JobID names one run of a job in a cluster (16 random bytes the JobManager draws); it is also the job id
// of the data plane's partition requests.
type JobID [16]byte

// String returns the id in hex.
func (j JobID) String() string { return hex.EncodeToString(j[:]) }

// ParseJobID parses the hex form String returns.
func ParseJobID(s string) (JobID, error) {
	var j JobID
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(j) {
		return j, errors.New("a job id is 32 hexadecimal digits")
	}
	copy(j[:], b)
	return j, nil
}

// Envelope is one message of a session, in either direction. Job is zero for the session's own messages
// (Register, Registered, Refused, Heartbeat, Leaving, NewLeader) and names the job every other message concerns.
type Envelope struct {
	Job  JobID
	Body any
}

// Session is one TaskManager's connection to its JobManager, seen from either end. Messages arrive in the
// order they were sent; a session that ends is never resumed (a TaskManager registers again as a new one).
type Session interface {
	// Send queues a message for the peer without waiting for it to be read. The queue is bounded
	// (SendQueue); a peer that leaves it full ends the session, since a message dropped would leave a task
	// or the job waiting for it forever. After the end Send returns the reason the session ended.
	Send(Envelope) error
	// Recv waits for the next message; at the end it returns the reason (io.EOF for a peer that closed it).
	Recv() (Envelope, error)
	// Close ends the session; reason is what the peer's Recv and later Sends return (nil: io.EOF).
	Close(reason error)
}

// SendQueue bounds the messages a Session holds for a peer that has not read them.
const SendQueue = 4096

// Build describes the binary a process runs. Every process of a cluster must run the same build: the job's
// code is the binary's, so a TaskManager of another build could not run the JobManager's job.
type Build struct {
	// Sum is the SHA-256 of the executable and its build information.
	Sum [32]byte
	// Describe is for people: "runnel v0.4.0, revision 9e2d…, go1.26.8".
	Describe string
}

// Register is a TaskManager's first message on a new session.
type Register struct {
	Version int
	// Name is for people ("tm-1"); the JobManager's id for the session is in Registered.
	Name  string
	Slots int
	// DataAddress is where its data server serves partitions to other TaskManagers.
	DataAddress string
	// BufferSize is its network buffer size; every TaskManager of a cluster must use the JobManager's.
	BufferSize int
	Build      Build
	// Kept lists the jobs whose tasks the TaskManager kept running after its session with the previous
	// leader ended (task continuity): the new leader answers each with AdoptJob or DropJob. Bounded by the
	// jobs a TaskManager runs.
	Kept []KeptJob
}

// KeptJob is one job a TaskManager kept running without a JobManager, as it reports it to the next leader:
// the job's setup as the previous leader sent it, what it knows of the job's checkpoints, and the current
// attempt of every subtask of the job it ran.
type KeptJob struct {
	Job   JobID
	Setup SetupJob
	// Checkpoint is the highest checkpoint id the TaskManager heard of for the job (triggered, acknowledged,
	// declined, aborted or completed): the next leader's checkpoint ids continue above it.
	Checkpoint int64
	// Restored is the id of the checkpoint or savepoint the job's run started from (0: none): the
	// TaskManager's build of the job reads it for a restore.
	Restored int64
	Tasks    []KeptTask
}

// KeptTask is the current attempt of one subtask on a TaskManager that kept its tasks.
type KeptTask = jobcore.KeptTask

// Registered accepts a registration.
type Registered struct {
	// TaskManager is the JobManager's id of this session (jobcore.TaskManagerID).
	TaskManager uint64
	// HeartbeatInterval is how often each side sends a Heartbeat; HeartbeatTimeout is the silence after
	// which a side declares the other lost (zero: never, in-process).
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// Epoch is the leadership epoch of the JobManager under high availability (0 without): a TaskManager
	// that looked the leader up on etcd refuses a session of another epoch, and leaves the session once
	// another epoch leads, so that no command of a deposed leader reaches its tasks.
	Epoch int64
}

// Refused refuses a registration; the session ends after it.
type Refused struct {
	Reason string
	// Permanent says registering again cannot help (another build): the TaskManager exits.
	Permanent bool
}

// Heartbeat says the sender is alive; any message counts as one. A TaskManager's says how much memory its
// process uses (the JobManager's, zero): HeapBytes is the Go heap's live objects, MemoryBytes all the
// memory the Go runtime holds from the operating system (heap, stacks, network buffers, in-flight logs'
// memory; about the resident set).
type Heartbeat struct {
	HeapBytes, MemoryBytes int64
}

// Leaving is a session message a TaskManager sends when it shuts down (SIGTERM: a pod being deleted),
// before it cancels its tasks and closes the session: the JobManager takes it as the TaskManager's loss at
// once, with its tasks failing over in one event and its slots gone from the pool, rather than finding out
// from the closed stream or the heartbeat timeout, or from the failures of the consumers its stopping
// tasks leave behind. The JobManager answers by ending the session once every job has the loss: the
// TaskManager stops its tasks only then (or after a bound of its own).
type Leaving struct {
	// Reason is for people: "shutting down".
	Reason string
}

// NewLeader is a session message a TaskManager sends when it leaves a JobManager because another leads
// (a later leadership epoch on etcd), before it ends the session: the deposed JobManager stops
// commanding at once, rather than failing over the tasks of the TaskManagers that leave it one by one.
type NewLeader struct {
	// Epoch is the epoch of the term that leads now.
	Epoch int64
}

// SetupJob makes a job known to a TaskManager before anything of it is deployed there. The TaskManager
// builds the job itself (the binary's job registry, or the in-process catalog of the mini-cluster) and
// answers with a jobcore.JobSetUp.
type SetupJob struct {
	Name string
	Args []string
	// Graph is graph.Fingerprint of the JobManager's build of the job: a TaskManager whose build differs
	// refuses the job.
	Graph [32]byte
	// Secret is the job's partition credential secret (network.PartitionCredential): never logged.
	Secret []byte
	// CheckpointStorage is the location of the job's checkpoint storage ("" when checkpointing is off).
	CheckpointStorage string
	// Savepoint is the location of the savepoint the job started from ("" none).
	Savepoint string
	// Probe, when set, names an object the JobManager wrote at the top of the checkpoint storage, holding
	// ProbeNonce: a TaskManager that cannot read it back does not share the JobManager's storage, and
	// refuses the job rather than write checkpoints no other process can restore.
	Probe      string
	ProbeNonce []byte
	// Start is the job's start on the JobManager's clock, in Unix nanoseconds: observations are dated
	// from it.
	Start int64
}

// ReleaseJob tells a TaskManager the job ended: it releases the job's partitions and storage, forgets its
// secret and answers with its last Accumulators.
type ReleaseJob struct{}

// AdoptJob tells a TaskManager that the leader took over a job it kept running (KeptJob): it sends what
// it held back for the job since its report, and carries on, reporting to the leader that adopted the job.
type AdoptJob struct{}

// DropJob tells a TaskManager that the leader did not take over a job it kept running: it cancels the
// job's tasks and releases the job (the leader restarts the job from its latest checkpoint, or it ended).
type DropJob struct {
	// Reason is for people: why the job's tasks could not be taken over.
	Reason string
}

// Accumulators carries the encoded values of a job's accumulators as built on one TaskManager, by name.
type Accumulators struct {
	Values map[string][]byte
	// Final marks the answer to ReleaseJob.
	Final bool
}
