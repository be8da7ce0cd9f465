package runnel

import (
	"fmt"
	"reflect"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/operator"
)

// Side outputs (docs/eventtime.md §7): a function emits records of another type, or records apart from
// its main output, to a tagged side output; SideOutput makes a stream of them.

// OutputTag names a side output of records of type T. Tags are told apart by their id, which must be used
// with one type per operator.
type OutputTag[T any] struct{ id string }

// NewOutputTag returns the tag with id.
func NewOutputTag[T any](id string) OutputTag[T] { return OutputTag[T]{id: id} }

// ID returns the tag's id.
func (t OutputTag[T]) ID() string { return t.id }

// Emit sends v to the side output from within a function (ctx is the context the function was given); on
// a stream with event time v takes the timestamp of the record being processed. Nothing reads a side
// output without a SideOutput stream: v is then dropped, as in Flink.
func (t OutputTag[T]) Emit(ctx RuntimeContext, v T) { operator.EmitSide(ctx, t.id, v) }

// SideOutput returns the stream of what the operator behind s emits to tag t.
func SideOutput[Out, T any](s *Stream[Out], t OutputTag[T]) *Stream[T] {
	env := s.env
	n := s.node("SideOutput")
	if n == nil {
		return newStream[T](env, env.addNode(0, "side", nil))
	}
	if t.id == "" {
		env.addErr(fmt.Errorf("SideOutput: the tag has no id: make it with NewOutputTag (at %s)", origin()))
	}
	declareSideTag(env, "SideOutput", n, t.id, reflect.TypeFor[T]())
	out := newStreamOf[T](env, n, s.timed)
	out.inputs[0].side = t.id
	return out
}

// declareSideTag records that node n emits records of type typ to tag id, and an error of the API what if
// the tag has another type there already: one type per tag and node.
func declareSideTag(env *Environment, what string, n *graph.StreamNode, id string, typ reflect.Type) {
	if env.sideTags == nil {
		env.sideTags = map[int]map[string]reflect.Type{}
	}
	tags := env.sideTags[n.ID]
	if tags == nil {
		tags = map[string]reflect.Type{}
		env.sideTags[n.ID] = tags
	}
	if prev, ok := tags[id]; ok && prev != typ {
		env.addErr(fmt.Errorf("%s: tag %q of %q is used with %s and %s: one type per tag (at %s)", what, id, n.Name, prev, typ, origin()))
	}
	tags[id] = typ
}
