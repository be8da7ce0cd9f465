package graph

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
)

// fingerprintVersion starts every encoding Fingerprint hashes: a change to the encoding changes it, so two
// processes of different encodings never agree by accident (they are refused as different builds anyway).
const fingerprintVersion = "runnel-jobgraph-v1"

// Fingerprint returns the SHA-256 of a canonical encoding of the job graph's shape: the job's name; per
// vertex its id, name, parallelism and max parallelism, every operator node (id, name, kind, parallelism,
// max parallelism, whether it starts a chain, origin file:line) and the edges chained inside it (endpoints,
// pattern, whether the pattern was set); per network edge its result id, endpoint vertices and operators,
// pattern, partition type and input index. Operator code (the payloads) is not hashed: it is the binary's,
// which the binary fingerprint covers.
//
// Two processes of one binary that build a job from the same arguments get the same fingerprint; a build
// that depends on anything else (a clock, the host, randomness, a global counter) shows up as a difference
// in one of these fields. It is a pure function of jg.
func Fingerprint(jg *JobGraph) [32]byte {
	e := fingerprinter{h: sha256.New()}
	e.str(fingerprintVersion)
	e.str(jg.Name)
	e.uint(uint64(len(jg.Vertices)))
	for _, v := range jg.Vertices {
		e.uint(uint64(v.ID))
		e.str(v.Name)
		e.int(v.Parallelism)
		e.int(v.MaxParallelism)
		e.uint(uint64(len(v.Nodes)))
		for _, n := range v.Nodes {
			e.int(n.ID)
			e.str(n.Name)
			e.str(n.Uid)
			e.uint(uint64(n.Kind))
			e.int(n.Parallelism)
			e.int(n.MaxParallelism)
			e.bool(n.StartsChain)
			e.str(n.Origin)
		}
		e.uint(uint64(len(v.ChainedEdges)))
		for _, ce := range v.ChainedEdges {
			e.streamEdge(ce)
		}
	}
	e.uint(uint64(len(jg.Edges)))
	for _, je := range jg.Edges {
		e.uint(uint64(je.Result))
		e.vertex(je.Source)
		e.vertex(je.Target)
		e.uint(uint64(je.Pattern))
		e.uint(uint64(je.PartitionType))
		e.int(je.InputIndex)
		e.bool(je.Stream != nil)
		if je.Stream != nil {
			e.streamEdge(je.Stream)
		}
	}
	var sum [32]byte
	e.h.Sum(sum[:0])
	return sum
}

// fingerprinter writes the canonical encoding: every value is self-delimiting (strings carry their length,
// integers are zig-zag or plain uvarints), so no two different sequences of fields encode alike.
type fingerprinter struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func (e *fingerprinter) uint(x uint64) {
	n := binary.PutUvarint(e.buf[:], x)
	e.h.Write(e.buf[:n])
}

func (e *fingerprinter) int(x int) {
	n := binary.PutVarint(e.buf[:], int64(x))
	e.h.Write(e.buf[:n])
}

func (e *fingerprinter) bool(b bool) {
	if b {
		e.uint(1)
	} else {
		e.uint(0)
	}
}

func (e *fingerprinter) str(s string) {
	e.uint(uint64(len(s)))
	e.h.Write([]byte(s))
}

// vertex encodes a reference to a vertex by id; a missing one (a malformed graph) is told apart from id 0.
func (e *fingerprinter) vertex(v *JobVertex) {
	if v == nil {
		e.int(-1)
		return
	}
	e.int(int(v.ID))
}

func (e *fingerprinter) streamEdge(se *StreamEdge) {
	e.int(se.Source)
	e.int(se.Target)
	e.uint(uint64(se.Pattern))
	e.bool(se.PatternSet)
	e.uint(uint64(se.TargetInput))
	e.str(se.SideOutput)
}
