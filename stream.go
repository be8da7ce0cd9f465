package runnel

import (
	"fmt"
	"math/bits"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
	"github.com/runnel-dev/runnel/internal/task"
)

// codecHolder is the codec of one operator's output, chosen lazily: only edges that cross a task boundary
// need it.
type codecHolder[T any] struct {
	c    codec.Codec[T]
	name func() string
}

func (h *codecHolder[T]) resolve() error {
	if h.c != nil {
		return nil
	}
	c, err := codec.For[T]()
	if err != nil {
		return fmt.Errorf("the output of %s crosses the network and needs a codec: %w (or pass one with .WithCodec)", h.name(), err)
	}
	h.c = c
	return nil
}

// input is one upstream of an operator: a producing node and how its records are distributed.
type input[T any] struct {
	node       *graph.StreamNode
	pattern    graph.Pattern
	patternSet bool
	hash       func(*T, []byte) (uint64, []byte)
	codec      *codecHolder[T]
	// side names the side output of node this input reads (an OutputTag's id); empty: its main output.
	side string
}

// Stream is a typed stream of records produced by one operator (or, after Union, several).
type Stream[T any] struct {
	env    *Environment
	inputs []input[T]
	// timed: the stream has event time (WithTimestamps upstream). Its operators then pass Timed[T] values
	// and its edges carry timestamps and watermarks; a stream without carries T exactly as before event
	// time existed (docs/eventtime.md §1).
	timed bool
}

// newStreamOf is newStream with event time when timed.
func newStreamOf[T any](env *Environment, n *graph.StreamNode, timed bool) *Stream[T] {
	s := newStream[T](env, n)
	s.timed = timed
	return s
}

func newStream[T any](env *Environment, n *graph.StreamNode) *Stream[T] {
	h := &codecHolder[T]{}
	h.name = func() string {
		at := ""
		if n.Origin != "" {
			at = ", created at " + n.Origin
		}
		return fmt.Sprintf("operator %q (record type %T%s)", n.Name, *new(T), at)
	}
	return &Stream[T]{env: env, inputs: []input[T]{{node: n, codec: h}}}
}

// node returns the single operator behind the stream, or records an error.
func (s *Stream[T]) node(what string) *graph.StreamNode {
	if len(s.inputs) != 1 {
		s.env.addErr(fmt.Errorf("%s: applies to the stream of one operator, not to a union (at %s)", what, origin()))
		return nil
	}
	return s.inputs[0].node
}

// Name names the operator that produces the stream. Names appear in reports and logs, select failure
// injection targets, and must be unique in a job.
func (s *Stream[T]) Name(name string) *Stream[T] {
	if n := s.node("Name"); n != nil {
		if name == "" {
			s.env.addErr(fmt.Errorf("Name: operator name must not be empty (at %s)", origin()))
			return s
		}
		n.Name = name
	}
	return s
}

// Uid gives the operator that produces the stream a stable id: the name of its state in checkpoints and
// savepoints. A job restored from a savepoint finds each operator's state by its uid, so a stateful
// operator with a Uid keeps its state when it is renamed, when operators are added or removed around it,
// or when the job chains differently. Without one the uid is the operator's name. Uids must be unique in
// a job.
func (s *Stream[T]) Uid(id string) *Stream[T] {
	if n := s.node("Uid"); n != nil {
		if id == "" {
			s.env.addErr(fmt.Errorf("Uid: operator uid must not be empty (at %s)", origin()))
			return s
		}
		n.Uid = id
	}
	return s
}

// SetParallelism sets the parallelism of the operator that produces the stream.
func (s *Stream[T]) SetParallelism(p int) *Stream[T] {
	if n := s.node("SetParallelism"); n != nil {
		if why, fixed := s.env.fixedParallelism[n.ID]; fixed && p != n.Parallelism {
			s.env.addErr(fmt.Errorf("SetParallelism(%d) on %q: %s (at %s)", p, n.Name, why, origin()))
			return s
		}
		n.Parallelism = p
	}
	return s
}

// SetMaxParallelism sets the number of key groups of the operator that produces the stream.
func (s *Stream[T]) SetMaxParallelism(p int) *Stream[T] {
	if n := s.node("SetMaxParallelism"); n != nil {
		n.MaxParallelism = p
	}
	return s
}

// StartNewChain keeps the producing operator out of its predecessor's chain.
func (s *Stream[T]) StartNewChain() *Stream[T] {
	if n := s.node("StartNewChain"); n != nil {
		n.StartsChain = true
	}
	return s
}

// WithCodec sets the codec used when the stream's records cross the network (default: codec.For[T]).
func (s *Stream[T]) WithCodec(c Codec[T]) *Stream[T] {
	if c == nil {
		s.env.addErr(fmt.Errorf("WithCodec: nil codec (at %s)", origin()))
		return s
	}
	for _, in := range s.inputs {
		in.codec.c = c
	}
	return s
}

func (s *Stream[T]) repartition(p graph.Pattern) *Stream[T] {
	out := &Stream[T]{env: s.env, inputs: make([]input[T], len(s.inputs)), timed: s.timed}
	for i, in := range s.inputs {
		in.pattern, in.patternSet, in.hash = p, true, nil
		out.inputs[i] = in
	}
	return out
}

// Forward sends records of subtask i to subtask i of the next operator (equal parallelism required).
func (s *Stream[T]) Forward() *Stream[T] { return s.repartition(graph.Forward) }

// Rebalance distributes records round-robin over all subtasks of the next operator.
func (s *Stream[T]) Rebalance() *Stream[T] { return s.repartition(graph.Rebalance) }

// Rescale distributes records round-robin over a subset of the next operator's subtasks, so that each
// producer talks to few consumers.
func (s *Stream[T]) Rescale() *Stream[T] { return s.repartition(graph.Rescale) }

// Broadcast sends every record to every subtask of the next operator.
func (s *Stream[T]) Broadcast() *Stream[T] { return s.repartition(graph.Broadcast) }

// connect makes the edges from the stream's inputs to node n.
func connect[T any](s *Stream[T], n *graph.StreamNode) { connectInput(s, n, 0) }

// connectInput makes the edges from the stream's inputs to input `input` of node n.
func connectInput[T any](s *Stream[T], n *graph.StreamNode, input uint8) {
	if s.timed {
		connectTimed(s, n, input)
		return
	}
	for _, in := range s.inputs {
		spec := &operator.EdgeSpec[T]{Hash: in.hash}
		e := &graph.StreamEdge{Source: in.node.ID, Target: n.ID, Pattern: in.pattern, PatternSet: in.patternSet, Payload: spec,
			TargetInput: input, SideOutput: in.side}
		h := in.codec
		s.env.edges = append(s.env.edges, e)
		s.env.resolvers = append(s.env.resolvers, edgeResolver{edge: e, resolve: func() error {
			if err := h.resolve(); err != nil {
				return err
			}
			spec.Codec = h.c
			return nil
		}})
	}
}

// connectTimed is connect for a stream with event time: its edges carry Timed[T] with the timed codec.
func connectTimed[T any](s *Stream[T], n *graph.StreamNode, input uint8) {
	for _, in := range s.inputs {
		spec := &operator.EdgeSpec[operator.Timed[T]]{Timed: true}
		if hash := in.hash; hash != nil {
			spec.Hash = func(v *operator.Timed[T], scratch []byte) (uint64, []byte) { return hash(&v.V, scratch) }
		}
		e := &graph.StreamEdge{Source: in.node.ID, Target: n.ID, Pattern: in.pattern, PatternSet: in.patternSet, Payload: spec,
			TargetInput: input, SideOutput: in.side}
		h := in.codec
		s.env.edges = append(s.env.edges, e)
		s.env.resolvers = append(s.env.resolvers, edgeResolver{edge: e, resolve: func() error {
			if err := h.resolve(); err != nil {
				return err
			}
			spec.Codec = operator.TimedCodec(h.c)
			return nil
		}})
	}
}

type edgeResolver struct {
	edge    *graph.StreamEdge
	resolve func() error
}

// union is Union without its checks, for a caller that made them and named its own API in its errors.
func union[T any](a, b *Stream[T]) *Stream[T] {
	return &Stream[T]{env: a.env, inputs: append(slices.Clone(a.inputs), b.inputs...), timed: a.timed || b.timed}
}

// Union merges streams of the same type; the next operator reads all of them.
func Union[T any](first *Stream[T], more ...*Stream[T]) *Stream[T] {
	out := &Stream[T]{env: first.env, inputs: append([]input[T](nil), first.inputs...), timed: first.timed}
	for _, s := range more {
		if s.env != first.env {
			first.env.addErr(fmt.Errorf("Union: streams belong to different environments (at %s)", origin()))
			continue
		}
		if s.timed != first.timed {
			timed, untimed := first, s
			if s.timed {
				timed, untimed = s, first
			}
			first.env.addErr(fmt.Errorf("Union: the stream of %q has event time and the stream of %q has none: give both a WatermarkStrategy (WithTimestamps) (at %s)",
				timed.inputs[0].node.Name, untimed.inputs[0].node.Name, origin()))
			continue
		}
		out.inputs = append(out.inputs, s.inputs...)
	}
	return out
}

// FromSource adds a source operator.
func FromSource[T any](env *Environment, src Source[T]) *Stream[T] {
	if src == nil {
		env.addErr(fmt.Errorf("FromSource: nil source (at %s)", origin()))
	}
	n := env.addNode(graph.SourceNode, "source", &operator.SourceSpec[T]{Source: src})
	return newStream[T](env, n)
}

func nilFunc(env *Environment, what string) {
	env.addErr(fmt.Errorf("%s: nil function (at %s)", what, origin()))
}

// Map applies fn to every record.
func Map[In, Out any](s *Stream[In], fn func(In) (Out, error)) *Stream[Out] {
	if fn == nil {
		nilFunc(s.env, "Map")
	}
	var spec any = &operator.MapSpec[In, Out]{Fn: fn}
	if s.timed {
		spec = &operator.MapSpec[operator.Timed[In], operator.Timed[Out]]{Fn: operator.StampMap(fn)}
	}
	n := s.env.addNode(graph.OperatorNode, "map", spec)
	connect(s, n)
	return newStreamOf[Out](s.env, n, s.timed)
}

// Filter keeps the records for which fn returns true.
func (s *Stream[T]) Filter(fn func(T) (bool, error)) *Stream[T] {
	if fn == nil {
		nilFunc(s.env, "Filter")
	}
	var spec any = &operator.FilterSpec[T]{Fn: fn}
	if s.timed {
		spec = &operator.FilterSpec[operator.Timed[T]]{Fn: operator.StampFilter(fn)}
	}
	n := s.env.addNode(graph.OperatorNode, "filter", spec)
	connect(s, n)
	return newStreamOf[T](s.env, n, s.timed)
}

// FlatMap calls fn for every record; fn emits any number of records to out.
func FlatMap[In, Out any](s *Stream[In], fn func(In, Collector[Out]) error) *Stream[Out] {
	if fn == nil {
		nilFunc(s.env, "FlatMap")
	}
	var spec any = &operator.FlatMapSpec[In, Out]{Fn: fn}
	if s.timed {
		spec = &operator.TimedFlatMapSpec[In, Out]{Fn: fn}
	}
	n := s.env.addNode(graph.OperatorNode, "flatmap", spec)
	connect(s, n)
	return newStreamOf[Out](s.env, n, s.timed)
}

// SinkOperator is the handle of a sink, for naming it and setting its parallelism.
type SinkOperator struct {
	env  *Environment
	node *graph.StreamNode
}

// Uid gives the sink a stable id, the name of its state in checkpoints (see Stream.Uid).
func (o *SinkOperator) Uid(id string) *SinkOperator {
	if id == "" {
		o.env.addErr(fmt.Errorf("Uid: operator uid must not be empty (at %s)", origin()))
		return o
	}
	o.node.Uid = id
	return o
}

// Name names the sink.
func (o *SinkOperator) Name(name string) *SinkOperator {
	if name == "" {
		o.env.addErr(fmt.Errorf("Name: operator name must not be empty (at %s)", origin()))
		return o
	}
	o.node.Name = name
	return o
}

// SetParallelism sets the sink's parallelism.
func (o *SinkOperator) SetParallelism(p int) *SinkOperator { o.node.Parallelism = p; return o }

// SinkTo writes the stream to a sink.
func (s *Stream[T]) SinkTo(sink Sink[T]) *SinkOperator {
	if sink == nil {
		s.env.addErr(fmt.Errorf("SinkTo: nil sink (at %s)", origin()))
	}
	var spec any = &operator.SinkSpec[T]{Sink: sink}
	if s.timed {
		spec = &operator.TimedSinkSpec[T]{Sink: sink}
	}
	n := s.env.addNode(graph.SinkNode, "sink", spec)
	connect(s, n)
	if c, ok := sink.(JobChecker); ok {
		s.env.jobCheckers = append(s.env.jobCheckers, sinkChecker{node: n, check: c})
	}
	return &SinkOperator{env: s.env, node: n}
}

// KeyedStream is a stream partitioned by a key: records with equal keys go to the same subtask, where keyed
// state is kept per key.
type KeyedStream[K comparable, T any] struct {
	s   *Stream[T]
	key func(T) K
	kc  codec.Codec[K]
}

// KeyBy partitions the stream by the key fn extracts. Keys are hashed from their codec encoding (codec.For
// by default, or keyCodec), so the assignment of keys to key groups is stable across runs and machines.
func KeyBy[T any, K comparable](s *Stream[T], fn func(T) K, keyCodec ...Codec[K]) *KeyedStream[K, T] {
	if fn == nil {
		nilFunc(s.env, "KeyBy")
	}
	var kc codec.Codec[K]
	if len(keyCodec) > 0 && keyCodec[0] != nil {
		kc = keyCodec[0]
	} else {
		var err error
		if kc, err = codec.For[K](); err != nil {
			s.env.addErr(fmt.Errorf("KeyBy: the key needs a codec to be hashed: %w (at %s)", err, origin()))
		}
	}
	hash := keyHash(fn, kc)
	ks := s.repartition(graph.Hash)
	for i := range ks.inputs {
		ks.inputs[i].hash = hash
	}
	return &KeyedStream[K, T]{s: ks, key: fn, kc: kc}
}

// Reduce combines the records of each key with fn and emits the running result after every record.
func Reduce[K comparable, T any](ks *KeyedStream[K, T], fn func(acc, v T) (T, error)) *Stream[T] {
	if fn == nil {
		nilFunc(ks.s.env, "Reduce")
	}
	var spec any = &operator.ReduceSpec[K, T]{Key: ks.key, KeyCodec: ks.kc, Fn: fn}
	if ks.s.timed {
		c, err := codec.For[T]()
		if err != nil {
			ks.s.env.addErr(fmt.Errorf("Reduce: the running result is keyed state and needs a codec: %w (at %s)", err, origin()))
		}
		key := ks.key
		spec = &operator.ReduceSpec[K, operator.Timed[T]]{Key: func(v operator.Timed[T]) K { return key(v.V) }, KeyCodec: ks.kc,
			Codec: operator.TimedCodec(c), Fn: operator.StampReduce(fn)}
	}
	n := ks.s.env.addNode(graph.OperatorNode, "reduce", spec)
	connect(ks.s, n)
	return newStreamOf[T](ks.s.env, n, ks.s.timed)
}

// Process runs a keyed process function; newFn makes one instance per parallel subtask.
func Process[K comparable, In, Out any](ks *KeyedStream[K, In], newFn func() KeyedProcessFunction[K, In, Out]) *Stream[Out] {
	if newFn == nil {
		nilFunc(ks.s.env, "Process")
	}
	var spec any = &operator.KeyedProcessSpec[K, In, Out]{Key: ks.key, KeyCodec: ks.kc, New: newFn}
	if ks.s.timed {
		spec = &operator.TimedKeyedProcessSpec[K, In, Out]{Key: ks.key, KeyCodec: ks.kc, New: newFn}
	}
	n := ks.s.env.addNode(graph.OperatorNode, "process", spec)
	connect(ks.s, n)
	return newStreamOf[Out](ks.s.env, n, ks.s.timed)
}

// KeyedProcessBase gives a KeyedProcessFunction no-op Open, EndInput and Close; embed it.
type KeyedProcessBase[K comparable, Out any] struct{}

// Open does nothing.
func (KeyedProcessBase[K, Out]) Open(KeyedContext[K]) error { return nil }

// EndInput does nothing.
func (KeyedProcessBase[K, Out]) EndInput(KeyedContext[K], Collector[Out]) error { return nil }

// Close does nothing.
func (KeyedProcessBase[K, Out]) Close() error { return nil }

// apiDir is the directory of the public API's source files, as the runtime reports file names (absolute,
// or module-relative under -trimpath). Comparing with it, rather than with the directory's name, keeps
// origin right in a checkout whose directory is not called "runnel".
var apiDir = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}()

// isAPIFile says file is one of Runnel's own files of this package (any but its tests, which are users).
func isAPIFile(file string) bool {
	return filepath.Dir(file) == apiDir && !strings.HasSuffix(file, "_test.go")
}

func shortFile(file string) string {
	return filepath.Join(filepath.Base(filepath.Dir(file)), filepath.Base(file))
}

// keyHash returns the function that hashes a record's key: xxhash64 of the key's codec encoding. Keys of
// common types take a path without the codec's interface call that yields the same hash, so key groups
// do not depend on which path computed them.
func keyHash[T any, K comparable](fn func(T) K, kc codec.Codec[K]) func(*T, []byte) (uint64, []byte) {
	builtin := kc != nil && isBuiltinCodec(kc)
	switch any(*new(K)).(type) {
	case int64:
		if builtin {
			// K is int64 here; reading it through a pointer avoids an interface conversion per record.
			return func(v *T, scratch []byte) (uint64, []byte) {
				k := fn(*v)
				return xxhash64Uint64(*(*uint64)(unsafe.Pointer(&k))), scratch
			}
		}
	case string:
		if builtin {
			return func(v *T, scratch []byte) (uint64, []byte) {
				k := fn(*v)
				return xxhash.Sum64String(*(*string)(unsafe.Pointer(&k))), scratch
			}
		}
	}
	return func(v *T, scratch []byte) (uint64, []byte) {
		b, err := kc.Append(scratch, fn(*v))
		if err != nil {
			task.Abort(fmt.Errorf("encode key for hashing: %w", err))
		}
		return xxhash.Sum64(b), b
	}
}

// xxhash64Uint64 is xxhash.Sum64 of the 8 little-endian bytes of x (XXH64 with seed 0 on one 8-byte lane),
// computed without a byte slice; TestKeyHashMatchesXXHash holds it to the library's result.
func xxhash64Uint64(x uint64) uint64 {
	const (
		p1 = 11400714785074694791
		p2 = 14029467366897019727
		p3 = 1609587929392839161
		p4 = 9650029242287828579
		p5 = 2870177450012600261
	)
	h := uint64(p5 + 8)
	k := bits.RotateLeft64(x*p2, 31) * p1
	h ^= k
	h = bits.RotateLeft64(h, 27)*p1 + p4
	h ^= h >> 33
	h *= p2
	h ^= h >> 29
	h *= p3
	h ^= h >> 32
	return h
}

// isBuiltinCodec reports whether c encodes like the built-in codec of its type (so the fast hash paths
// agree with it).
func isBuiltinCodec[K any](c codec.Codec[K]) bool {
	var k K
	switch any(k).(type) {
	case int64:
		return any(c) == any(codec.Int64())
	case string:
		return any(c) == any(codec.String())
	}
	return false
}
