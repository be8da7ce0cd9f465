package deploy

import (
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
)

// State is the lifecycle state of a task attempt.
type State int32

// The states of an attempt, in lifecycle order.
const (
	Created State = iota
	Deploying
	Initializing
	Running
	Finished
	Canceling
	Canceled
	Failed
)

var stateNames = [...]string{"CREATED", "DEPLOYING", "INITIALIZING", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILED"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Terminal reports whether the state is final.
func (s State) Terminal() bool { return s == Finished || s == Canceled || s == Failed }

// Update reports a state change of a task attempt, or (with Observation set) something it observed while
// running, in which case State is not a change.
type Update struct {
	Attempt     ident.Attempt
	State       State
	Err         error
	Observation *Observation
	// RecordsIn and RecordsOut are the attempt's final record counts, set with a terminal State: the
	// TaskManager forgets an attempt once it ended, so the report carries what is left to know of it.
	RecordsIn, RecordsOut uint64
	// Watermark is the attempt's last watermark, with a terminal State (math.MinInt64: none).
	Watermark int64
	// Metrics are the attempt's operator metrics as last published, with a terminal State.
	Metrics []Metric
}

// ObservationKind says what a task observed.
type ObservationKind uint8

const (
	// ChannelJoined: an input channel delivered its first buffer to this attempt. Lost counts the records
	// the producer sent on the channel after the position this attempt restored and before the first record
	// it received: records that affect no state (approximate recovery's loss on that channel).
	ChannelJoined ObservationKind = iota + 1
	// FirstOutput: the attempt emitted (or, a sink, wrote) its first record.
	FirstOutput
	// InputEnded: the attempt's input ended and its operators heard EndInput; it waits for a checkpoint
	// that covers its end before it finishes (see finish.go).
	InputEnded
	// ReplayDone: the attempt replayed its determinant log to the end and reads live (task failover): a
	// failure of a neighbour no longer needs the replay, and the job master takes it as a task failure of
	// its own again.
	ReplayDone
	// ChannelReplayed: Records is how many records the attempt read again on the channel while it replayed
	// (task failover): those its producer's in-flight log held from the restored checkpoint on. Reported
	// just before ReplayDone, for each channel with any.
	ChannelReplayed
	// DuplicatesDropped: this attempt took its output over (task failover) and regenerated records that the
	// stream of output channel Channel had already; Records is how many its subpartition dropped. Reported
	// once the attempt is past them on every output.
	DuplicatesDropped
)

// Observation is a fact a running task reports to the job master.
type Observation struct {
	Kind    ObservationKind
	At      time.Time
	Channel ChannelSpec
	// Lost and PartialSkipped describe a ChannelJoined.
	Lost           uint64
	PartialSkipped uint64
	// Records is the count of a ChannelReplayed or a DuplicatesDropped.
	Records uint64
	// SnapshotBefore, of a ChannelJoined, is the newest checkpoint whose snapshot the attempt took before
	// it joined the channel (0: none). Those checkpoints record the channel at the position the attempt
	// restored, before the gap: a later attempt that restores one of them counts the gap again.
	SnapshotBefore int64
}

// MaxMetricsPerTask bounds the metrics the operators of one task register (counters and gauges of user
// functions, and the engine's own, such as a window's late records): past it registration fails, naming
// the operator, so a function that makes a metric per key cannot grow the table without end.
const MaxMetricsPerTask = 256

// Metric is one published operator metric of a task: "operator/name" and its value.
type Metric struct {
	Name  string
	Value int64
}

// and the job master falls back to region failover.
var ErrReplayDiverged = errors.New("replay diverged")

// ErrCannotReplay is wrapped by the error of an attempt under task failover whose chain says, after its
// restore, that it cannot replay (ReplayChecker: a source whose reader is not deterministic), so that the
// TaskManager can tell it from other failures without reading its text.
var ErrCannotReplay = errors.New("chain cannot replay")
