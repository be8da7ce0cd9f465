package network

import "errors"

var (
	// ErrCorrupt reports bytes that violate the framing: a bad header, a record that does not continue where
	// the previous buffer said it would, an impossible length.
	ErrCorrupt = errors.New("network: corrupt data")
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
)
