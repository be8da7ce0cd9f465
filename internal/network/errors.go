package network

import (
	"errors"
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
)

var (
	// ErrCorrupt reports bytes that violate the framing: a bad header, a record that does not continue where
	// the previous buffer said it would, an impossible length.
	ErrCorrupt = errors.New("network: corrupt data")
	// ErrLogIncomplete reports a read of an in-flight log from a point it no longer holds: truncated past
	// it, or dropped when the log's budget ran out. The consumer cannot be replayed; its job master falls
	// back to restarting more.
	ErrLogIncomplete = errors.New("network: in-flight log incomplete")
	// ErrRegeneratedOther reports a new producer attempt that, after a takeover, regenerated other output
	// than the stream its readers have: a record of another length where the stream was cut, or a barrier
	// or end of partition before the end of what the stream holds. Its replay was not one.
	ErrRegeneratedOther = errors.New("network: regenerated output differs from the stream")
	// ErrRecordTooLarge reports a record longer than the configured maximum record size.
	ErrRecordTooLarge = errors.New("network: record too large")
	// ErrPartitionNotFound reports a request for a partition the producer side does not (yet) have.
	ErrPartitionNotFound = errors.New("network: partition not found")
	// ErrPartitionNotReady reports a request for a blocking partition whose producer has not finished yet. It
	// wraps ErrPartitionNotFound: a consumer that waits for a producer to be deployed waits for this too.
	ErrPartitionNotReady error = &notReadyError{}
	// ErrPartitionReleased reports access to a partition that was released.
	ErrPartitionReleased = errors.New("network: partition released")
	// ErrViewReleased reports a read from a view that was released (its consumer went away or was replaced).
	ErrViewReleased = errors.New("network: subpartition view released")
	// ErrStaleAttempt reports a request from a consumer attempt older than the one already attached.
	ErrStaleAttempt = errors.New("network: request from a stale attempt")
	// ErrAlreadyConsumed reports a second reader of a subpartition that cannot be re-read.
	ErrAlreadyConsumed = errors.New("network: subpartition already has a reader")
	// ErrCanceled reports an operation aborted because its task is being cancelled.
	ErrCanceled = errors.New("network: canceled")
	// ErrInsufficientBuffers reports that a TaskManager's network memory cannot hold a task's buffer pools.
	ErrInsufficientBuffers = errors.New("network: insufficient network buffers")
	// ErrConsumerGone reports that the consumer of a pipelined subpartition went away without releasing it
	// (it stopped reading, its connection still open), so that nothing written to the subpartition can be
	// delivered anymore. It is matched by every *ConsumerGoneError.
	ErrConsumerGone = errors.New("network: consumer gone")
)

// ConsumerGoneError says which consumer of which subpartition is gone, from where, and why. A pipelined
// partition fails with it (see View.Fail): every later write of the producer returns it, so that the
// producer task fails and the job fails over instead of waiting for a reader that will never come back.
type ConsumerGoneError struct {
	Partition    ident.PartitionID
	Subpartition int
	// Consumer is the consumer attempt that held the view.
	Consumer ident.Attempt
	// Address is the consumer's network address ("" for a reader on the same TaskManager).
	Address string
	// Idle, when non-zero, is how long the consumer took no data although it had credit for it.
	Idle time.Duration
	// Cause is the error that revealed the loss (the timed-out write), if any.
	Cause error
}

func (e *ConsumerGoneError) Error() string {
	from := ""
	if e.Address != "" {
		from = " at " + e.Address
	}
	why := "went away without releasing the subpartition"
	if e.Idle > 0 {
		why = fmt.Sprintf("stopped reading for %s without disconnecting", e.Idle)
	}
	msg := fmt.Sprintf("consumer %s%s of partition %s subpartition %d is gone: it %s", e.Consumer, from, e.Partition, e.Subpartition, why)
	if e.Cause != nil {
		msg += ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap makes the error match ErrConsumerGone and its cause.
func (e *ConsumerGoneError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrConsumerGone}
	}
	return []error{ErrConsumerGone, e.Cause}
}
