package operator

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/network"
	"github.com/runnel-dev/runnel/internal/state"
	"github.com/runnel-dev/runnel/internal/task"
)

// ChainFactory returns the factory that builds the operators of vertex v for one subtask, with the failure
// injections that target them.
func ChainFactory(v *graph.JobVertex, injections []*Injection) task.ChainFactory {
	return func(rt *task.Runtime) (task.Chain, error) { return buildChain(v, rt, injections) }
}

type chain struct {
	names   []string   // head first
	uids    []string   // the operators' stable ids, head first: the names of their entries in a state blob
	ctxs    []*Context // head first
	ops     []Built    // head first
	readers []Reader
	source  SourceDriver
	// inputTimed says, per network input, whether it carries a stream with event time; logical is the
	// head's input it feeds (0, or 1 for a two-input head's second).
	inputTimed []bool
	logical    []int
	// clocked lists the operators with processing-time work (NextDeadline set), head first.
	clocked []int
}

func buildChain(v *graph.JobVertex, rt *task.Runtime, injections []*Injection) (*chain, error) {
	if len(rt.Outputs) != len(v.Outputs) {
		return nil, fmt.Errorf("vertex %q has %d outputs, task has %d partitions", v.Name, len(v.Outputs), len(rt.Outputs))
	}
	c := &chain{names: make([]string, len(v.Nodes)), uids: v.UIDs(), ctxs: make([]*Context, len(v.Nodes)), ops: make([]Built, len(v.Nodes))}
	index := make(map[int]int, len(v.Nodes))
	for i, n := range v.Nodes {
		index[n.ID] = i
		c.names[i] = n.Name
	}
	// Build tail first: chained targets come after their sources in v.Nodes.
	for i := len(v.Nodes) - 1; i >= 0; i-- {
		n := v.Nodes[i]
		spec, ok := n.Payload.(NodeSpec)
		if !ok {
			return nil, fmt.Errorf("operator %q has no runtime implementation (%T)", n.Name, n.Payload)
		}
		ctx := NewContext(rt, n.Name)
		ctx.ref.Origin = n.Origin
		rt.Operators = append(rt.Operators, ctx.ref)
		ctx.mark = int32(len(rt.Operators))
		c.ctxs[i] = ctx
		for _, inj := range injections {
			if inj.Targets(n.Name, int(rt.Info.Attempt.Index)) {
				ctx.injs = append(ctx.injs, inj)
			}
		}
		var downstream []any
		for _, e := range v.ChainedEdges {
			if e.Source == n.ID {
				in := c.ops[index[e.Target]].Input
				if in == nil {
					return nil, fmt.Errorf("chained operator %q takes no input", v.Nodes[index[e.Target]].Name)
				}
				if e.SideOutput != "" {
					ctx.side = append(ctx.side, sideOutput{tag: e.SideOutput, out: in})
				} else {
					downstream = append(downstream, in)
				}
				ctx.wmOut = append(ctx.wmOut, chained{c: c, i: index[e.Target]})
			}
		}
		for j, je := range v.Outputs {
			if je.Stream.Source != n.ID {
				continue
			}
			edge, ok := je.Stream.Payload.(Edge)
			if !ok {
				return nil, fmt.Errorf("edge %s -> %s has no runtime implementation", v.Name, je.Target.Name)
			}
			w, err := edge.NewWriter(ctx, rt.Outputs[j], je, int(rt.Info.Attempt.Index))
			if err != nil {
				return nil, err
			}
			if tag := je.Stream.SideOutput; tag != "" {
				ctx.side = append(ctx.side, sideOutput{tag: tag, out: w})
			} else {
				downstream = append(downstream, w)
			}
			if t, ok := w.(watermarkTarget); ok {
				ctx.wmOut = append(ctx.wmOut, t)
			}
		}
		var b Built
		err := ctx.guard(func() (err error) { b, err = spec.Build(ctx, downstream); return err })
		if err != nil {
			return nil, err
		}
		c.ops[i] = b
	}

	if v.IsSource() {
		c.source = c.ops[0].Source
		if c.source == nil {
			return nil, fmt.Errorf("source %q has no reader", v.Nodes[0].Name)
		}
	}
	for _, je := range v.Inputs {
		edge, ok := je.Stream.Payload.(Edge)
		if !ok {
			return nil, fmt.Errorf("edge %s -> %s has no runtime implementation", je.Source.Name, v.Name)
		}
		target := c.ops[0].Input
		if je.Stream.TargetInput == 1 {
			target = c.ops[0].Input2
		}
		if target == nil {
			return nil, fmt.Errorf("input %d of %q feeds input %d of %q, which has none", je.InputIndex, v.Name, je.Stream.TargetInput, v.Nodes[0].Name)
		}
		r, err := edge.NewReader(target)
		if err != nil {
			return nil, fmt.Errorf("input %d of %q: %w", je.InputIndex, v.Name, err)
		}
		c.readers = append(c.readers, r)
		c.inputTimed = append(c.inputTimed, edge.IsTimed())
		c.logical = append(c.logical, int(je.Stream.TargetInput))
	}
	return c, nil
}

// watermarkTarget is where an operator's watermarks and watermark statuses go: a chained successor, or the
// writer of a network output (which broadcasts them to every consumer subtask).
type watermarkTarget interface {
	emitWatermark(ms int64) error
	emitWatermarkStatus(idle bool) error
}

// chained is the watermark target of chained operator i.
type chained struct {
	c *chain
	i int
}

func (t chained) emitWatermark(ms int64) error        { return t.c.watermarkAt(t.i, ms) }
func (t chained) emitWatermarkStatus(idle bool) error { return t.c.watermarkStatusAt(t.i, idle) }

// watermarkAt hands watermark ms to operator i: to its hook, which forwards it when it is done with it, or
// straight on when it has none.
func (c *chain) watermarkAt(i int, ms int64) error {
	ctx := c.ctxs[i]
	f := c.ops[i].Watermark
	if f == nil {
		return ctx.EmitWatermark(ms)
	}
	prev := ctx.enter()
	err := f(ms)
	ctx.leave(prev)
	if err != nil {
		return fmt.Errorf("operator %q: watermark %d: %w", c.names[i], ms, err)
	}
	return nil
}

// watermarkStatusAt hands a watermark status to operator i, as watermarkAt does a watermark.
func (c *chain) watermarkStatusAt(i int, idle bool) error {
	ctx := c.ctxs[i]
	f := c.ops[i].WatermarkStatus
	if f == nil {
		return ctx.EmitWatermarkStatus(idle)
	}
	prev := ctx.enter()
	err := f(idle)
	ctx.leave(prev)
	if err != nil {
		return fmt.Errorf("operator %q: watermark status: %w", c.names[i], err)
	}
	return nil
}

// RestoreWatermark implements task.Chain.
func (c *chain) RestoreWatermark(floor int64) error {
	for i, op := range c.ops {
		if op.RestoreWatermark != nil {
			if err := c.ctxs[i].guard(func() error { op.RestoreWatermark(floor); return nil }); err != nil {
				return err
			}
		}
	}
	return nil
}

// InputTimed implements task.Chain.
func (c *chain) InputTimed(input int) bool { return c.inputTimed[input] }

// LogicalInput implements task.Chain.
func (c *chain) LogicalInput(input int) int { return c.logical[input] }

// ProcessWatermark implements task.Chain.
func (c *chain) ProcessWatermark(ms int64) error { return c.watermarkAt(0, ms) }

// ProcessWatermarkStatus implements task.Chain.
func (c *chain) ProcessWatermarkStatus(idle bool) error { return c.watermarkStatusAt(0, idle) }

// NextDeadline implements task.Chain: the earliest deadline of the chain's operators.
func (c *chain) NextDeadline() int64 {
	d := int64(math.MaxInt64)
	for _, i := range c.clocked {
		d = min(d, c.ops[i].NextDeadline())
	}
	return d
}

// OnProcessingTime implements task.Chain: each operator whose deadline has come does its work, head first.
func (c *chain) OnProcessingTime(nowMillis int64) error {
	for _, i := range c.clocked {
		op := c.ops[i]
		if op.NextDeadline() > nowMillis {
			continue
		}
		ctx := c.ctxs[i]
		prev := ctx.enter()
		err := op.OnProcessingTime(nowMillis)
		ctx.leave(prev)
		if err != nil {
			return fmt.Errorf("operator %q: processing time %d: %w", c.names[i], nowMillis, err)
		}
	}
	return nil
}

// Open implements task.Chain: tail first, so that an operator's downstream is ready when it emits. Then
// it knows which operators have processing-time work (their state is declared in Open).
func (c *chain) Open() error {
	for i := len(c.ops) - 1; i >= 0; i-- {
		if f := c.ops[i].Open; f != nil {
			if err := c.ctxs[i].guard(f); err != nil {
				return fmt.Errorf("open %q: %w", c.names[i], err)
			}
		}
	}
	for i, b := range c.ops {
		if b.NextDeadline != nil && (b.Clocked == nil || b.Clocked()) {
			c.clocked = append(c.clocked, i)
		}
	}
	return nil
}

// ProcessBuffer implements task.Chain.
func (c *chain) ProcessBuffer(input int, dec *network.RecordDecoder) (int, error) {
	return c.readers[input].ProcessBuffer(dec)
}

// IsSource implements task.Chain.
func (c *chain) IsSource() bool { return c.source != nil }

// PollSource implements task.Chain.
func (c *chain) PollSource() (task.SourceStatus, error) { return c.source.Poll() }

// CheckReplay implements task.ReplayChecker: a source chain replays only if its reader says it can.
func (c *chain) CheckReplay() error {
	if c.source == nil {
		return nil
	}
	return c.source.CheckReplay()
}

// SourceAvailable implements task.Chain.
func (c *chain) SourceAvailable() <-chan struct{} { return c.source.Available() }

// EndInput implements task.Chain: head first, so that what an operator emits at the end reaches the next
// operator before that one ends.
func (c *chain) EndInput() error {
	for i, op := range c.ops {
		if op.EndInput != nil {
			if err := c.ctxs[i].guard(op.EndInput); err != nil {
				return fmt.Errorf("%q: %w", c.names[i], err)
			}
		}
	}
	return nil
}

// Snapshot implements task.Chain. An operator's entry is its own state, with its list states (if it has
// any) before it.
func (c *chain) Snapshot(id int64) ([]task.StateWriter, error) {
	var ws []task.StateWriter
	for i, op := range c.ops {
		lists := c.ctxs[i].lists
		if op.Snapshot == nil && len(lists) == 0 {
			continue
		}
		var (
			w     func(io.Writer) error
			delta func(io.Writer) (int64, error)
		)
		switch {
		case op.SnapshotIncremental != nil:
			err := c.ctxs[i].guard(func() (err error) { w, delta, err = op.SnapshotIncremental(id); return err })
			if err != nil {
				return nil, err
			}
		case op.Snapshot != nil:
			err := c.ctxs[i].guard(func() (err error) { w, err = op.Snapshot(id); return err })
			if err != nil {
				return nil, err
			}
		}
		if len(lists) > 0 {
			prefix, err := withLists(lists, nil)
			if err != nil {
				return nil, fmt.Errorf("operator %q: %w", c.names[i], err)
			}
			if own := delta; own != nil {
				delta = func(out io.Writer) (int64, error) {
					if _, err := out.Write(prefix); err != nil {
						return 0, err
					}
					n, err := own(out)
					return n + int64(len(prefix)), err // the list states are written whole
				}
			}
			w = prefixed(prefix, w)
		}
		if w != nil {
			ws = append(ws, task.StateWriter{Operator: c.uids[i], Write: w, Delta: delta})
		}
	}
	return ws, nil
}

// prefixed returns a writer that writes prefix (the operator's list states) before what own (if any)
// writes.
func prefixed(prefix []byte, own func(io.Writer) error) func(io.Writer) error {
	return func(out io.Writer) error {
		if _, err := out.Write(prefix); err != nil {
			return err
		}
		if own == nil {
			return nil
		}
		return own(out)
	}
}

// restoreLists hands operator i its restored list states.
func (c *chain) restoreLists(i int, lists map[string][][]byte) error {
	ctx := c.ctxs[i]
	ctx.restoredLists = lists
	for _, l := range ctx.lists {
		if err := l.restore(lists[l.listName()]); err != nil {
			return fmt.Errorf("operator %q: %w", c.names[i], err)
		}
	}
	return nil
}

// Restore implements task.Chain.
func (c *chain) Restore(states map[string][]byte) error {
	return restoreEach(c, states, func(i int, data []byte) error {
		if pieces, ok, err := task.SplitPieces(data); ok || err != nil {
			if err != nil {
				return fmt.Errorf("operator %q: %w", c.names[i], err)
			}
			return c.restorePieces(i, [][][]byte{pieces}, false)
		}
		lists, own, err := splitLists(data)
		if err != nil {
			return fmt.Errorf("operator %q: %w", c.names[i], err)
		}
		if lists != nil {
			if err := c.restoreLists(i, redistribute([][]restoredList{lists}, 0, 1)); err != nil {
				return err
			}
			if len(own) == 0 {
				return nil
			}
		}
		if c.ops[i].Restore == nil {
			return fmt.Errorf("the checkpoint holds state for operator %q, which keeps no state in this job", c.names[i])
		}
		return c.ctxs[i].guard(func() error { return c.ops[i].Restore(own) })
	})
}

// RestoreRescaled implements task.Chain: list states are redistributed (evenly, or as a union), keyed
// state filtered to the subtask's key groups; other state cannot be split.
func (c *chain) RestoreRescaled(parts map[string][][]byte) error {
	return restoreEach(c, parts, func(i int, ps [][]byte) error {
		chains := make([][][]byte, 0, len(ps))
		framed := false
		for _, p := range ps {
			pieces, ok, err := task.SplitPieces(p)
			if err != nil {
				return fmt.Errorf("operator %q: %w", c.names[i], err)
			}
			if !ok {
				pieces = [][]byte{p}
			}
			framed = framed || ok
			chains = append(chains, pieces)
		}
		if framed {
			return c.restorePieces(i, chains, true)
		}
		var lists [][]restoredList
		var own [][]byte
		hasOwn := false
		for _, p := range ps {
			l, o, err := splitLists(p)
			if err != nil {
				return fmt.Errorf("operator %q: %w", c.names[i], err)
			}
			lists = append(lists, l)
			own = append(own, o)
			hasOwn = hasOwn || len(o) > 0
		}
		ctx := c.ctxs[i]
		if err := c.restoreLists(i, redistribute(lists, ctx.SubtaskIndex(), ctx.Parallelism())); err != nil {
			return err
		}
		if !hasOwn {
			return nil
		}
		if c.ops[i].RestoreParts == nil {
			return fmt.Errorf("operator %q keeps state that is not keyed (a source's position or a sink's state, say), "+
				"which cannot be split over another parallelism: give it its old parallelism (SetParallelism), "+
				"or keep it in operator list state (NewOperatorListState)", c.names[i])
		}
		return c.ctxs[i].guard(func() error { return c.ops[i].RestoreParts(own) })
	})
}

// restorePieces restores operator i from chains of incremental state (task.JoinPieces), one per old
// subtask: the list states of each chain's last piece, and the keyed state of all pieces, in order (the
// backend applies each delta on top of the pieces before it). rescaled says the chains are of another
// parallelism.
func (c *chain) restorePieces(i int, chains [][][]byte, rescaled bool) error {
	var lists [][]restoredList
	var own [][]byte
	for _, pieces := range chains {
		var keyed [][]byte
		for j, p := range pieces {
			l, o, err := splitLists(p)
			if err != nil {
				return fmt.Errorf("operator %q: %w", c.names[i], err)
			}
			if j == len(pieces)-1 {
				lists = append(lists, l)
			}
			keyed = append(keyed, o)
		}
		// From the last full snapshot on: one written where a delta was asked for (the backend had
		// nothing to build on) supersedes the pieces before it.
		own = append(own, keyed[state.ChainStart(keyed):]...)
	}
	ctx := c.ctxs[i]
	index, parallelism := 0, 1
	if rescaled {
		index, parallelism = ctx.SubtaskIndex(), ctx.Parallelism()
	}
	if err := c.restoreLists(i, redistribute(lists, index, parallelism)); err != nil {
		return err
	}
	if c.ops[i].RestoreParts == nil {
		return fmt.Errorf("operator %q: the checkpoint holds incremental state for it, which only keyed state is", c.names[i])
	}
	return ctx.guard(func() error { return c.ops[i].RestoreParts(own) })
}

// NotifyCheckpointComplete implements task.Chain.
func (c *chain) NotifyCheckpointComplete(id int64) error {
	for _, ctx := range c.ctxs {
		for _, inj := range ctx.injs {
			inj.checkpointComplete(id)
		}
	}
	for i, op := range c.ops {
		if op.CheckpointComplete != nil {
			if err := c.ctxs[i].guard(func() error { return op.CheckpointComplete(id) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// NotifyCheckpointAborted implements task.AbortListener: the operators that listen hear that checkpoint id
// was aborted, head first.
func (c *chain) NotifyCheckpointAborted(id int64) error {
	for i, op := range c.ops {
		if op.CheckpointAborted != nil {
			if err := c.ctxs[i].guard(func() error { return op.CheckpointAborted(id) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close implements task.Chain: every operator is closed, errors are joined.
func (c *chain) Close() error {
	var errs []error
	for i, op := range c.ops {
		if op.Close != nil {
			if err := c.ctxs[i].guard(op.Close); err != nil {
				errs = append(errs, fmt.Errorf("close %q: %w", c.names[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// restoreEach hands each operator of c its entry of states (by uid), and refuses entries for operators c
// lacks.
func restoreEach[S any](c *chain, states map[string]S, restore func(i int, s S) error) error {
	for uid := range states {
		if !slices.Contains(c.uids, uid) {
			return fmt.Errorf("the checkpoint holds state for operator uid %q, which is not in this task (%v)", uid, c.uids)
		}
	}
	for i, uid := range c.uids {
		if s, ok := states[uid]; ok {
			if err := restore(i, s); err != nil {
				return err
			}
		}
	}
	return nil
}
