package operator

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/runnel-dev/runnel/codec"
)

// Operator list state (docs/eventtime.md §8.2): state of an operator that is not keyed (a source's split
// positions, say), as lists of values that can be redistributed at another parallelism: evenly (the old
// subtasks' lists concatenated in subtask order and cut into contiguous parts) or as a union (every subtask
// gets everything).

// OperatorListState is a list of values of one operator subtask, checkpointed with it.
type OperatorListState[V any] interface {
	Get() []V
	Add(v V)
	Update(vs []V)
	Clear()
}

// RescalableSource is a Source whose readers keep their position in operator list state only (no
// CheckpointedReader bytes): it may be restored at another parallelism. Rescalable returns true.
type RescalableSource interface {
	Rescalable() bool
}

// SourceRescalable reports whether the source operator of spec may be restored at another parallelism.
func SourceRescalable(spec any) bool {
	var src any
	switch s := spec.(type) {
	case interface{ source() any }:
		src = s.source()
	default:
		return false
	}
	r, ok := src.(RescalableSource)
	return ok && r.Rescalable()
}

func (s *SourceSpec[T]) source() any      { return s.Source }
func (s *TimedSourceSpec[T]) source() any { return s.Source }

// MaxListStates bounds the list states one operator declares.
const MaxListStates = 64

type listState[V any] struct {
	name  string
	union bool
	c     codec.Codec[V]
	vs    []V
}

func (l *listState[V]) Get() []V      { return l.vs }
func (l *listState[V]) Add(v V)       { l.vs = append(l.vs, v) }
func (l *listState[V]) Update(vs []V) { l.vs = append(l.vs[:0], vs...) }
func (l *listState[V]) Clear()        { l.vs = l.vs[:0] }

// opList is the non-generic face of a list state, for snapshots and restores.
type opList interface {
	listName() string
	isUnion() bool
	encode() ([][]byte, error)
	restore(elems [][]byte) error
}

func (l *listState[V]) listName() string { return l.name }
func (l *listState[V]) isUnion() bool    { return l.union }

func (l *listState[V]) encode() ([][]byte, error) {
	out := make([][]byte, len(l.vs))
	for i, v := range l.vs {
		b, err := l.c.Append(nil, v)
		if err != nil {
			return nil, fmt.Errorf("list state %q: %w", l.name, err)
		}
		out[i] = b
	}
	return out, nil
}

func (l *listState[V]) restore(elems [][]byte) error {
	l.vs = l.vs[:0]
	for _, e := range elems {
		var v V
		if err := l.c.Decode(e, &v); err != nil {
			return fmt.Errorf("list state %q: %w", l.name, err)
		}
		l.vs = append(l.vs, v)
	}
	return nil
}

// NewOperatorListState declares a list state of the operator behind ctx (in Open, CreateReader or
// CreateWriter); union says how it is redistributed at another parallelism.
func NewOperatorListState[V any](ctx RuntimeContext, name string, c codec.Codec[V], union bool) (OperatorListState[V], error) {
	oc := contextOf(ctx)
	if oc == nil {
		return nil, fmt.Errorf("list state %q: the context %T is not one the engine gave", name, ctx)
	}
	for _, l := range oc.lists {
		if l.listName() == name {
			return nil, fmt.Errorf("operator %q: list state %q is declared twice", oc.operator, name)
		}
	}
	if len(oc.lists) == MaxListStates {
		return nil, fmt.Errorf("operator %q: list state %q: %d list states already, the most an operator may have", oc.operator, name, MaxListStates)
	}
	if c == nil {
		var err error
		if c, err = codec.For[V](); err != nil {
			return nil, fmt.Errorf("operator %q: list state %q needs a codec: %w", oc.operator, name, err)
		}
	}
	l := &listState[V]{name: name, union: union, c: c}
	oc.lists = append(oc.lists, l)
	if oc.restoredLists != nil {
		if err := l.restore(oc.restoredLists[name]); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// opStateMagic starts an operator's entry that has list states beside its own state: the lists, then the
// operator's bytes. An entry without it is the operator's bytes alone (older checkpoints read as before).
var opStateMagic = []byte("RNOPLST1")

// withLists wraps an operator's own snapshot bytes with its list states, if it has any.
func withLists(lists []opList, own []byte) ([]byte, error) {
	if len(lists) == 0 {
		return own, nil
	}
	b := append([]byte(nil), opStateMagic...)
	b = binary.AppendUvarint(b, uint64(len(lists)))
	for _, l := range lists {
		elems, err := l.encode()
		if err != nil {
			return nil, err
		}
		b = binary.AppendUvarint(b, uint64(len(l.listName())))
		b = append(b, l.listName()...)
		mode := byte(0)
		if l.isUnion() {
			mode = 1
		}
		b = append(b, mode)
		b = binary.AppendUvarint(b, uint64(len(elems)))
		for _, e := range elems {
			b = binary.AppendUvarint(b, uint64(len(e)))
			b = append(b, e...)
		}
	}
	return append(b, own...), nil
}

// restoredList is one list state read from an entry.
type restoredList struct {
	name  string
	union bool
	elems [][]byte
}

// splitLists separates an entry into its list states and the operator's own bytes.
func splitLists(data []byte) ([]restoredList, []byte, error) {
	if !bytes.HasPrefix(data, opStateMagic) {
		return nil, data, nil
	}
	b := data[len(opStateMagic):]
	errBad := errors.New("malformed operator list state")
	uv := func() (uint64, error) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errBad
		}
		b = b[k:]
		return v, nil
	}
	n, err := uv()
	if err != nil || n > MaxListStates {
		return nil, nil, errBad
	}
	out := make([]restoredList, 0, n)
	for range n {
		l, err := uv()
		if err != nil || l > uint64(len(b)) {
			return nil, nil, errBad
		}
		name := string(b[:l])
		b = b[l:]
		if len(b) == 0 || b[0] > 1 {
			return nil, nil, errBad
		}
		rl := restoredList{name: name, union: b[0] == 1}
		b = b[1:]
		count, err := uv()
		if err != nil || count > uint64(len(b)) {
			return nil, nil, errBad
		}
		for range count {
			el, err := uv()
			if err != nil || el > uint64(len(b)) {
				return nil, nil, errBad
			}
			rl.elems = append(rl.elems, b[:el])
			b = b[el:]
		}
		out = append(out, rl)
	}
	return out, b, nil
}

// redistribute gives subtask i of p its share of the lists of several old subtasks (in old subtask order):
// an even split's contiguous part, or a union's everything.
func redistribute(parts [][]restoredList, i, p int) map[string][][]byte {
	all := map[string][][]byte{}
	union := map[string]bool{}
	var names []string
	for _, ls := range parts {
		for _, l := range ls {
			if _, seen := all[l.name]; !seen {
				names = append(names, l.name)
				all[l.name] = nil
			}
			all[l.name] = append(all[l.name], l.elems...)
			union[l.name] = l.union
		}
	}
	out := make(map[string][][]byte, len(names))
	for _, name := range names {
		elems := all[name]
		if union[name] {
			out[name] = elems
			continue
		}
		lo, hi := len(elems)*i/p, len(elems)*(i+1)/p
		out[name] = elems[lo:hi]
	}
	return out
}
