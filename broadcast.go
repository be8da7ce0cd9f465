package runnel

import (
	"errors"
	"fmt"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Broadcast state (docs/eventtime.md §6.2): a stream of rules goes to every subtask of a keyed operator,
// which keeps them in broadcast state (one copy per subtask, equal on all) and applies them to its keyed
// records.

// KeyedBroadcastProcessFunction processes a keyed stream with a broadcast stream of R beside it:
// ProcessBroadcastElement updates the broadcast state (a map MK -> MV) on every subtask, ProcessElement
// reads it for each keyed record.
type KeyedBroadcastProcessFunction[K comparable, T, R any, MK comparable, MV any, Out any] = operator.KeyedBroadcastProcessFunction[K, T, R, MK, MV, Out]

// BroadcastState is the writable view of the broadcast state, in ProcessBroadcastElement.
type BroadcastState[MK comparable, MV any] = operator.BroadcastState[MK, MV]

// ReadOnlyBroadcastState is the view of the broadcast state in ProcessElement.
type ReadOnlyBroadcastState[MK comparable, MV any] = operator.ReadOnlyBroadcastState[MK, MV]

// BroadcastContext is the context of ProcessBroadcastElement.
type BroadcastContext[K comparable, MK comparable, MV any] = operator.BroadcastContext[K, MK, MV]

// KeyedBroadcastContext is the context of ProcessElement.
type KeyedBroadcastContext[K comparable, MK comparable, MV any] = operator.KeyedBroadcastContext[K, MK, MV]

// BroadcastConnectedStreams are a keyed stream and a broadcast stream, to be processed together.
type BroadcastConnectedStreams[K comparable, T, R any] struct {
	ks    *KeyedStream[K, T]
	rules *Stream[R]
}

// ConnectBroadcast sends every record of rules to every subtask of the operator that processes ks.
func ConnectBroadcast[K comparable, T, R any](ks *KeyedStream[K, T], rules *Stream[R]) *BroadcastConnectedStreams[K, T, R] {
	if rules.env != ks.s.env {
		ks.s.env.addErr(fmt.Errorf("ConnectBroadcast: the streams belong to different environments (at %s)", origin()))
	}
	return &BroadcastConnectedStreams[K, T, R]{ks: ks, rules: rules.Broadcast()}
}

// ProcessBroadcast runs a keyed broadcast process function; newFn makes one per parallel subtask. The
// broadcast state's keys and values are keyed state's: they need codecs (codec.For). Restored at another
// parallelism, every subtask takes a copy of the state (the copies were equal).
func ProcessBroadcast[K comparable, T, R any, MK comparable, MV any, Out any](c *BroadcastConnectedStreams[K, T, R],
	newFn func() KeyedBroadcastProcessFunction[K, T, R, MK, MV, Out]) *Stream[Out] {
	env := c.ks.s.env
	if newFn == nil {
		nilFunc(env, "ProcessBroadcast")
	}
	kc, errK := codec.For[MK]()
	vc, errV := codec.For[MV]()
	if errK != nil || errV != nil {
		env.addErr(fmt.Errorf("ProcessBroadcast: the broadcast state is checkpointed and needs codecs: %w (at %s)", errors.Join(errK, errV), origin()))
	}
	n := env.addNode(graph.OperatorNode, "broadcast", &operator.BroadcastSpec[K, T, R, MK, MV, Out]{Key: c.ks.key, KeyCodec: c.ks.kc,
		MapKey: kc, MapValue: vc, New: newFn, Timed: c.ks.s.timed, RulesTimed: c.rules.timed})
	n.Inputs = 2
	connectInput(c.ks.s, n, 0)
	connectInput(c.rules, n, 1)
	return newStreamOf[Out](env, n, c.ks.s.timed)
}
