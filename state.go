package runnel

import (
	"time"

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
	return state.NewValue[V](backendOf(ctx), name, first(c))
}

// NewListState declares a keyed list state in a keyed function's Open.
func NewListState[V any](ctx RuntimeContext, name string, c ...Codec[V]) (ListState[V], error) {
	return state.NewList[V](backendOf(ctx), name, first(c))
}

// NewMapState declares a keyed map state in a keyed function's Open.
func NewMapState[MK comparable, MV any](ctx RuntimeContext, name string) (MapState[MK, MV], error) {
	return state.NewMap[MK, MV](backendOf(ctx), name, nil, nil)
}

func first[T any](cs []Codec[T]) Codec[T] {
	if len(cs) > 0 {
		return cs[0]
	}
	return nil
}

// TTLUpdate says which accesses restart a TTL state entry's time to live.
type TTLUpdate int

const (
	// OnCreateAndWrite restarts it when the entry is written (Update, Add, Put): the default.
	OnCreateAndWrite TTLUpdate = iota
	// OnReadAndWrite restarts it when the entry is read as well (Value, Get, Range).
	OnReadAndWrite
)

// StateTTL is the time to live of keyed state declared through WithTTL.
type StateTTL struct {
	// TTL is how long, in processing time, an entry lives after its last write (or read, per UpdateOn);
	// at least a millisecond.
	TTL time.Duration
	// UpdateOn says which accesses restart the time to live.
	UpdateOn TTLUpdate
}

// WithTTL returns ctx for declaring keyed state that expires: NewValueState, NewListState and NewMapState
// called with the returned context make states whose entries (a value, each list element, each map entry)
// are gone ttl.TTL after their last write, or read with OnReadAndWrite, in the task's processing time
// (WithClock). An expired entry is never returned, is left out of checkpoints, and is cleared in the
// background (a bounded sweep every second) if it is never read again. Each entry's write time is kept
// with it, in checkpoints too, so the remaining time to live survives restore and rescale. Turning TTL on
// or off for a state that a checkpoint holds fails the restore: give the state a new name instead. The
// returned context is only for the state constructors.
func WithTTL(ctx RuntimeContext, ttl StateTTL) RuntimeContext {
	if t, ok := ctx.(ttlContext); ok {
		ctx = t.RuntimeContext
	}
	return ttlContext{RuntimeContext: ctx, ttl: state.TTL{TTL: ttl.TTL, RefreshOnRead: ttl.UpdateOn == OnReadAndWrite}}
}

// ttlContext is a runtime context whose state constructors make TTL states.
type ttlContext struct {
	RuntimeContext
	ttl state.TTL
}

// backendOf returns the keyed backend behind ctx, marked for TTL states when ctx came from WithTTL.
func backendOf(ctx RuntimeContext) state.Backend {
	if t, ok := ctx.(ttlContext); ok {
		return state.WithTTL(operator.KeyedBackend(t.RuntimeContext), t.ttl)
	}
	return operator.KeyedBackend(ctx)
}
