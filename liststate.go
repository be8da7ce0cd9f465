package runnel

import (
	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/operator"
)

// OperatorListState is a list of values of one operator subtask (not keyed), checkpointed with it: a
// source reader's split positions, a sink writer's pending work. Declare it in Open, CreateReader or
// CreateWriter.
type OperatorListState[V any] = operator.OperatorListState[V]

// NewOperatorListState declares a list state that, restored at another parallelism, is split evenly: the
// old subtasks' lists, concatenated in subtask order, cut into as many contiguous parts as there are
// subtasks now (Flink's even-split redistribution). A source that keeps its splits' positions in it can be
// rescaled. c is optional (default codec.For[V]).
func NewOperatorListState[V any](ctx RuntimeContext, name string, c ...Codec[V]) (OperatorListState[V], error) {
	return operator.NewOperatorListState(ctx, name, optionalCodec(c), false)
}

// NewUnionListState declares a list state that, restored at another parallelism, gives every subtask all
// of the old subtasks' elements (Flink's union redistribution).
func NewUnionListState[V any](ctx RuntimeContext, name string, c ...Codec[V]) (OperatorListState[V], error) {
	return operator.NewOperatorListState(ctx, name, optionalCodec(c), true)
}

func optionalCodec[V any](c []Codec[V]) codec.Codec[V] {
	if len(c) > 0 {
		return c[0]
	}
	return nil
}

// RescalableSource is a Source whose readers keep their position in operator list state only (no
// CheckpointedReader bytes), so a savepoint of it may be restored at another parallelism: the positions are
// redistributed like the list state. Rescalable returns true.
type RescalableSource = operator.RescalableSource
