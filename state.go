package runnel

import (
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/state"
)

// ValueState holds one value per key.
type ValueState[V any] = state.ValueState[V]

// ListState holds a list per key.
type ListState[V any] = state.ListState[V]

// MapState holds a map per key.
type MapState[MK comparable, MV any] = state.MapState[MK, MV]

// NewValueState declares a keyed value state in a keyed function's Open. Values are checkpointed with
// codec.For[V] unless a codec is given.
func NewValueState[V any](ctx RuntimeContext, name string, c ...Codec[V]) (ValueState[V], error) {
	return state.NewValue[V](operator.KeyedBackend(ctx), name, first(c))
}

// NewListState declares a keyed list state in a keyed function's Open.
func NewListState[V any](ctx RuntimeContext, name string, c ...Codec[V]) (ListState[V], error) {
	return state.NewList[V](operator.KeyedBackend(ctx), name, first(c))
}

// NewMapState declares a keyed map state in a keyed function's Open.
func NewMapState[MK comparable, MV any](ctx RuntimeContext, name string) (MapState[MK, MV], error) {
	return state.NewMap[MK, MV](operator.KeyedBackend(ctx), name, nil, nil)
}

func first[T any](cs []Codec[T]) Codec[T] {
	if len(cs) > 0 {
		return cs[0]
	}
	return nil
}
