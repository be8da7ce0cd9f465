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

// NewValueState declares a keyed value state in a keyed function's Open.
func NewValueState[V any](ctx RuntimeContext, name string) (ValueState[V], error) {
	return state.NewValue[V](operator.KeyedBackend(ctx), name)
}

// NewListState declares a keyed list state in a keyed function's Open.
func NewListState[V any](ctx RuntimeContext, name string) (ListState[V], error) {
	return state.NewList[V](operator.KeyedBackend(ctx), name)
}

// NewMapState declares a keyed map state in a keyed function's Open.
func NewMapState[MK comparable, MV any](ctx RuntimeContext, name string) (MapState[MK, MV], error) {
	return state.NewMap[MK, MV](operator.KeyedBackend(ctx), name)
}
