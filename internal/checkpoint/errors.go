package checkpoint

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Callers branch on them with errors.Is; every error this package returns wraps at most one
// of ErrNotFound, ErrCorrupt and ErrUnsupportedVersion, so a clean absence is never mistaken for damage.
var (
	// ErrNotFound means the object, checkpoint or savepoint asked for cleanly does not exist (no checkpoint
	// was ever committed under the location, no _metadata in a savepoint directory). A state blob that
	// committed metadata lists but that is gone is corruption, not ErrNotFound.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt means stored data failed verification: bad magic, bad checksum, truncated, wrong size,
	// undecodable metadata, or a blob listed in metadata that is missing. The concrete error is a
	// *CorruptError.
	ErrCorrupt = errors.New("corrupt checkpoint data")
	// ErrUnsupportedVersion means an object was written in a format version this build cannot read.
	ErrUnsupportedVersion = errors.New("unsupported checkpoint format version")
	// ErrIncomplete means a checkpoint directory exists but has no _metadata: the checkpoint was never
	// committed (still in progress, aborted, or cut short by a crash). Latest passes over such directories.
	ErrIncomplete = errors.New("incomplete checkpoint (no _metadata)")
	// ErrExists means a commit or savepoint would overwrite committed metadata.
	ErrExists = errors.New("already exists")
	// ErrIncompatible means a checkpoint does not fit the job it is restored into; the concrete error is an
	// *IncompatibleError.
	ErrIncompatible = errors.New("checkpoint does not match the job's operators")
	// ErrTaskNotReady is what a task declines a checkpoint with when it cannot take part yet (still
	// deploying or restoring). Such declines abort the checkpoint without counting as a failure.
	ErrTaskNotReady = errors.New("task not ready for checkpoint")
	// ErrTooManyFailures is wrapped by Ready.FailJob when consecutive checkpoint failures exceed
	// Config.TolerableFailed.
	ErrTooManyFailures = errors.New("too many consecutive checkpoint failures")
)

// Problem classifies a CorruptError.
type Problem uint8

// Problems that verification detects.
const (
	// ProblemBadMagic: the object does not start with the expected magic bytes.
	ProblemBadMagic Problem = iota + 1
	// ProblemTruncated: the object is shorter than its header or its reference says.
	ProblemTruncated
	// ProblemSizeMismatch: the object is longer than its header or its reference says.
	ProblemSizeMismatch
	// ProblemBadChecksum: the CRC-32C does not match the content, or not the checksum in the reference.
	ProblemBadChecksum
	// ProblemBadPayload: the envelope is intact but the metadata inside does not decode or is inconsistent.
	ProblemBadPayload
	// ProblemMissingBlob: committed metadata lists a state blob that does not exist.
	ProblemMissingBlob
	// ProblemTooLarge: the object is larger than any object this package writes of its kind.
	ProblemTooLarge
)

var problemNames = [...]string{
	ProblemBadMagic:     "bad magic",
	ProblemTruncated:    "truncated",
	ProblemSizeMismatch: "size mismatch",
	ProblemBadChecksum:  "checksum mismatch",
	ProblemBadPayload:   "bad payload",
	ProblemMissingBlob:  "missing blob",
	ProblemTooLarge:     "too large",
}

// String names the problem ("checksum mismatch").
func (p Problem) String() string {
	if int(p) < len(problemNames) && problemNames[p] != "" {
		return problemNames[p]
	}
	return fmt.Sprintf("problem(%d)", uint8(p))
}

// CorruptError reports stored data that failed verification. errors.Is(err, ErrCorrupt) holds for it.
type CorruptError struct {
	// Key is the object's key relative to the storage location ("chk-7/_metadata").
	Key string
	// Problem says what is wrong.
	Problem Problem
	// Detail gives the numbers ("want 1024 bytes, have 512").
	Detail string
}

// Error implements error.
func (e *CorruptError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("corrupt checkpoint data in %s: %s", e.Key, e.Problem)
	}
	return fmt.Sprintf("corrupt checkpoint data in %s: %s (%s)", e.Key, e.Problem, e.Detail)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// VersionError reports an object in a format version newer than this build reads.
// errors.Is(err, ErrUnsupportedVersion) holds for it.
type VersionError struct {
	// Key names the object.
	Key string
	// Version is the version found; Supported the highest this build reads.
	Version   uint16
	Supported uint16
}

// Error implements error.
func (e *VersionError) Error() string {
	return fmt.Sprintf("%s: format version %d is not supported (this build reads up to %d); restore with a newer Runnel",
		e.Key, e.Version, e.Supported)
}

// Is makes errors.Is(err, ErrUnsupportedVersion) true.
func (e *VersionError) Is(target error) bool { return target == ErrUnsupportedVersion }

// IncompatibleError reports a checkpoint whose operators differ from the job's. errors.Is(err,
// ErrIncompatible) holds for it.
type IncompatibleError struct {
	CheckpointID int64
	// Missing are operators that have state in the checkpoint but are not in the job.
	Missing []string
	// Extra are operators of the job that the checkpoint has no state for.
	Extra []string
	// Mismatched describes operators present on both sides whose shape differs (parallelism, vertex id).
	Mismatched []string
	// ByUID says the checkpoint maps state to operators by uid (format 2): Missing then lists uids, and
	// the state could be dropped on purpose.
	ByUID bool
}

// Error implements error.
func (e *IncompatibleError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checkpoint %d does not match the job's operators:", e.CheckpointID)
	if len(e.Missing) > 0 && e.ByUID {
		fmt.Fprintf(&b, " checkpoint has state for operator uids missing from the job: %s (give the operator that should keep it this Uid, or drop the state with --allow-non-restored-state / WithAllowNonRestoredState);", quoteList(e.Missing))
	} else if len(e.Missing) > 0 {
		fmt.Fprintf(&b, " checkpoint has state for operators missing from the job: %s;", quoteList(e.Missing))
	}
	if len(e.Extra) > 0 {
		fmt.Fprintf(&b, " job has operators the checkpoint has no state for: %s;", quoteList(e.Extra))
	}
	if len(e.Mismatched) > 0 {
		fmt.Fprintf(&b, " operators whose shape changed: %s;", strings.Join(e.Mismatched, ", "))
	}
	b.WriteString(" restore from a checkpoint or savepoint taken by the same job, or start without one")
	return b.String()
}

// Is makes errors.Is(err, ErrIncompatible) true.
func (e *IncompatibleError) Is(target error) bool { return target == ErrIncompatible }

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}
