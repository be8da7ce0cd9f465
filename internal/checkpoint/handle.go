package checkpoint

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/ident"
)

// BlobRef names one state blob inside a checkpoint directory, with what a reader needs to verify it.
type BlobRef struct {
	// Key is the blob's name relative to its checkpoint directory ("v2-1-a0-state"); the same key is used
	// in a savepoint copy.
	Key string
	// Size is the stored object's length in bytes (envelope included).
	Size int64
	// CRC is the CRC-32C the object ends with.
	CRC uint32
	// Shared says the blob is shared state of an incremental checkpoint: it is stored under shared/ in the
	// checkpoint storage (not in a checkpoint's directory), may be listed by several checkpoints, and is
	// deleted once no retained checkpoint lists it (Storage.Retain). In a savepoint every blob is its own.
	Shared bool
}

// StateHandle describes the state one subtask attempt contributed to a checkpoint. It is opaque to the
// coordinator and serialized into the checkpoint metadata.
type StateHandle struct {
	// Attempt is the attempt that took the snapshot; the coordinator sets it from the ack's sender.
	Attempt ident.Attempt
	// Finished marks a subtask that had finished (bounded input) before it could take part; it carries no
	// state and a restore should treat the subtask as finished.
	Finished bool
	// Blobs are the state blobs written with Storage.WriteState, in the order the task wants them back.
	Blobs []BlobRef
	// Inline is small state kept in the metadata itself (a source offset, say). Keep it small: metadata is
	// bounded by MaxMetadataBytes as a whole.
	Inline []byte
	// Operators lists, sorted, the uids of the operators whose state the blobs hold. A restore places each
	// operator's state by it, whatever vertex the operator is in then. Empty in checkpoints of format 1,
	// which are restored only into the same vertices.
	Operators []string
}

// Vertex records one job vertex (an operator chain) as it was when a checkpoint was taken.
type Vertex struct {
	ID ident.VertexID
	// Name is the vertex's operator name (for a chain, the chained names as the job graph prints them).
	Name string
	// Parallelism is the number of subtasks.
	Parallelism int32
	// Operators are the uids of the vertex's operators, head first (graph.JobVertex.UIDs). Empty in
	// checkpoints of format 1.
	Operators []string
}

// CompletedCheckpoint is a checkpoint every expected subtask acknowledged: what the job master persists
// with Storage.CommitMetadata and what a restore reads back.
type CompletedCheckpoint struct {
	ID int64
	// TimestampMillis is the trigger time (the time barriers carry).
	TimestampMillis int64
	// CompletedMillis is the time of the last acknowledgement.
	CompletedMillis int64
	Mode            barrier.Mode
	// Vertices lists every vertex of the job, sorted by ID.
	Vertices []Vertex
	// States holds one handle per subtask, sorted by subtask.
	States []StateHandle
}

// State returns the handle of subtask s.
func (cp *CompletedCheckpoint) State(s ident.Subtask) (StateHandle, bool) {
	i, ok := slices.BinarySearchFunc(cp.States, s, func(h StateHandle, s ident.Subtask) int {
		return compareSubtask(h.Attempt.Subtask, s)
	})
	if !ok {
		return StateHandle{}, false
	}
	return cp.States[i], true
}

// VertexByID returns the recorded vertex with the given id.
func (cp *CompletedCheckpoint) VertexByID(id ident.VertexID) (Vertex, bool) {
	for _, v := range cp.Vertices {
		if v.ID == id {
			return v, true
		}
	}
	return Vertex{}, false
}

// Vertex returns the recorded vertex with the given name (the one with the lowest id if several share it).
func (cp *CompletedCheckpoint) Vertex(name string) (Vertex, bool) {
	for _, v := range cp.Vertices {
		if v.Name == name {
			return v, true
		}
	}
	return Vertex{}, false
}

// Validate checks the checkpoint's structure: a positive id, vertices sorted by id with non-empty names and
// positive parallelism, and exactly one state handle per subtask, sorted, each with valid blob
// keys. Vertex names need not be unique. Storage checks it before writing metadata and after reading it back.
func (cp *CompletedCheckpoint) Validate() error {
	if cp.ID < 1 {
		return fmt.Errorf("checkpoint id %d is not positive", cp.ID)
	}
	if !cp.Mode.Valid() {
		return fmt.Errorf("checkpoint %d: unknown mode %d", cp.ID, cp.Mode)
	}
	if len(cp.Vertices) == 0 {
		return fmt.Errorf("checkpoint %d: no vertices", cp.ID)
	}
	want := 0
	for i, v := range cp.Vertices {
		if i > 0 && v.ID <= cp.Vertices[i-1].ID {
			return fmt.Errorf("checkpoint %d: vertices not sorted by id at v%d", cp.ID, v.ID)
		}
		if v.Name == "" {
			return fmt.Errorf("checkpoint %d: vertex v%d has no name", cp.ID, v.ID)
		}
		if v.Parallelism < 1 {
			return fmt.Errorf("checkpoint %d: vertex %q has parallelism %d", cp.ID, v.Name, v.Parallelism)
		}
		want += int(v.Parallelism)
	}
	if len(cp.States) != want {
		return fmt.Errorf("checkpoint %d: %d state handles for %d subtasks", cp.ID, len(cp.States), want)
	}
	k := 0
	for _, v := range cp.Vertices {
		for idx := int32(0); idx < v.Parallelism; idx++ {
			h := cp.States[k]
			k++
			if h.Attempt.Subtask != (ident.Subtask{Vertex: v.ID, Index: idx}) {
				return fmt.Errorf("checkpoint %d: state handle %d is for %s, want v%d[%d]", cp.ID, k-1,
					h.Attempt.Subtask, v.ID, idx)
			}
			if h.Attempt.Number < 0 {
				return fmt.Errorf("checkpoint %d: %s has negative attempt", cp.ID, h.Attempt)
			}
			if h.Finished && (len(h.Blobs) > 0 || len(h.Inline) > 0) {
				return fmt.Errorf("checkpoint %d: finished subtask %s carries state", cp.ID, h.Attempt)
			}
			for _, b := range h.Blobs {
				if err := validBlobKey(b.Key); err != nil {
					return fmt.Errorf("checkpoint %d: %s: %w", cp.ID, h.Attempt, err)
				}
				if b.Size < envelopeOverhead {
					return fmt.Errorf("checkpoint %d: blob %q has size %d, below the envelope's %d bytes",
						cp.ID, b.Key, b.Size, envelopeOverhead)
				}
			}
			for j, op := range h.Operators {
				if j > 0 && op <= h.Operators[j-1] {
					return fmt.Errorf("checkpoint %d: %s: operators not sorted and unique at %q", cp.ID, h.Attempt, op)
				}
				if len(v.Operators) > 0 && !slices.Contains(v.Operators, op) {
					return fmt.Errorf("checkpoint %d: %s holds state of operator %q, which vertex %q lacks", cp.ID, h.Attempt, op, v.Name)
				}
			}
		}
	}
	uids := map[string]ident.VertexID{}
	for _, v := range cp.Vertices {
		for _, op := range v.Operators {
			if op == "" {
				return fmt.Errorf("checkpoint %d: vertex %q has an operator without a uid", cp.ID, v.Name)
			}
			if w, dup := uids[op]; dup {
				return fmt.Errorf("checkpoint %d: operator uid %q is in vertices v%d and v%d", cp.ID, op, w, v.ID)
			}
			uids[op] = v.ID
		}
	}
	return nil
}

// validBlobKey accepts the names WriteState makes: non-empty, no path separators or dots leading out of
// the directory, not the metadata name.
func validBlobKey(key string) error {
	switch {
	case key == "" || len(key) > 200:
		return fmt.Errorf("blob key %q: empty or longer than 200 bytes", key)
	case key == metadataKey || strings.HasPrefix(key, "."):
		return fmt.Errorf("blob key %q is reserved", key)
	case strings.ContainsAny(key, "/\\"):
		return fmt.Errorf("blob key %q contains a path separator", key)
	}
	return nil
}

// Compatible checks that a job made of the named operators (vertex names, one entry per vertex) can be
// restored from cp: every operator with state in the checkpoint must be in the job and every operator of
// the job must be in the checkpoint. The error, an *IncompatibleError, names the missing and the extra
// operators.
func Compatible(cp *CompletedCheckpoint, operators []string) error {
	have := make(map[string]int, len(cp.Vertices))
	for _, v := range cp.Vertices {
		have[v.Name]++
	}
	job := make(map[string]int, len(operators))
	for _, o := range operators {
		job[o]++
	}
	e := &IncompatibleError{CheckpointID: cp.ID}
	for name, n := range have {
		if job[name] < n {
			e.Missing = append(e.Missing, name)
		}
	}
	for name, n := range job {
		if have[name] < n {
			e.Extra = append(e.Extra, name)
		}
	}
	if len(e.Missing) == 0 && len(e.Extra) == 0 {
		return nil
	}
	slices.Sort(e.Missing)
	slices.Sort(e.Extra)
	return e
}

// CompatibleVertices is Compatible plus a shape check: each vertex of the job must have the same id as
// the vertex of the same name in cp, and the same parallelism where fixed says so (a source, whose
// positions cannot be split). Other vertices may change parallelism: their keyed state is redistributed
// by key group when restored, and state that is not keyed is refused then, naming the operator.
func CompatibleVertices(cp *CompletedCheckpoint, vertices []Vertex, fixed func(Vertex) bool) error {
	names := make([]string, len(vertices))
	for i, v := range vertices {
		names[i] = v.Name
	}
	err := Compatible(cp, names)
	e, _ := err.(*IncompatibleError)
	if err != nil && e == nil {
		return err
	}
	if e == nil {
		e = &IncompatibleError{CheckpointID: cp.ID}
	}
	// Vertices sharing a name are paired in id order on both sides.
	byName := make(map[string][]Vertex, len(cp.Vertices))
	for _, v := range cp.Vertices {
		byName[v.Name] = append(byName[v.Name], v)
	}
	jobVertices := slices.Clone(vertices)
	slices.SortStableFunc(jobVertices, func(a, b Vertex) int { return cmp.Compare(a.ID, b.ID) })
	for _, v := range jobVertices {
		olds := byName[v.Name]
		if len(olds) == 0 {
			continue
		}
		old := olds[0]
		byName[v.Name] = olds[1:]
		if old.Parallelism != v.Parallelism && fixed != nil && fixed(v) {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%q parallelism %d in checkpoint, %d in job (a source: its positions cannot be split, keep its parallelism)",
				v.Name, old.Parallelism, v.Parallelism))
		}
		if old.ID != v.ID {
			e.Mismatched = append(e.Mismatched, fmt.Sprintf("%q is vertex v%d in checkpoint, v%d in job",
				v.Name, old.ID, v.ID))
		}
	}
	if len(e.Missing) == 0 && len(e.Extra) == 0 && len(e.Mismatched) == 0 {
		return nil
	}
	return e
}

func compareSubtask(a, b ident.Subtask) int {
	if c := cmp.Compare(a.Vertex, b.Vertex); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}

// HasShared reports whether any state handle of cp lists a shared blob (an incremental checkpoint).
func (cp *CompletedCheckpoint) HasShared() bool {
	for _, h := range cp.States {
		for _, b := range h.Blobs {
			if b.Shared {
				return true
			}
		}
	}
	return false
}
