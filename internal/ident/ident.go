// Package ident holds the identities that fence the runtime: which vertex, which parallel subtask, which
// attempt of that subtask, which result partition. Every control message, partition request and credit
// announcement carries one of these so that whatever comes from a replaced attempt can be recognised and
// rejected.
//
// It owns plain comparable values and their formatting only; it must not import any other Runnel package.
package ident

import "fmt"

// VertexID is the index of a JobVertex (a task after chaining) in its JobGraph.
type VertexID int32

// ResultID is the index of an intermediate result (one output edge of a JobVertex) in its JobGraph.
type ResultID int32

// Subtask names one parallel instance of a vertex, independent of attempts.
type Subtask struct {
	Vertex VertexID
	Index  int32
}

// String formats the subtask as "v3[1]"; callers that know the vertex name format it themselves.
func (s Subtask) String() string { return fmt.Sprintf("v%d[%d]", s.Vertex, s.Index) }

// Attempt is one run of a subtask (Flink's ExecutionAttemptID). A restart makes a new attempt number.
type Attempt struct {
	Subtask
	Number int32
}

// String formats the attempt as "v3[1]#2".
func (a Attempt) String() string { return fmt.Sprintf("%s#%d", a.Subtask, a.Number) }

// Newer reports whether a is a later attempt of the same subtask than b.
func (a Attempt) Newer(b Attempt) bool { return a.Subtask == b.Subtask && a.Number > b.Number }

// PartitionID names one result partition: the output of one producer attempt for one intermediate result.
// A restarted producer makes a new partition; a restarted consumer of an approximate partition reconnects to
// the same one.
type PartitionID struct {
	Result   ResultID
	Producer Attempt
}

// String formats the partition as "r2@v1[0]#0".
func (p PartitionID) String() string { return fmt.Sprintf("r%d@%s", p.Result, p.Producer) }
