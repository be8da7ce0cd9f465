package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/ident"
)

// MaxMetadataBytes bounds a _metadata object (envelope included). Commits of larger metadata fail, and a
// larger object found on read is reported as corrupt without being read. Inline state counts against it.
const MaxMetadataBytes = 64 << 20

const metadataKey = "_metadata"

// Metadata payload: JSON, so that an operator can read a checkpoint with standard tools once the 16-byte
// header is skipped. These structs are the format; CompletedCheckpoint may grow without changing them.
// Unknown fields are rejected: a new field means a new format version. Version 2 added the operators of
// vertices and states (the uids that map state to operators); version 1 metadata, without them, still
// reads.
type metaV1 struct {
	ID              int64      `json:"id"`
	TimestampMillis int64      `json:"timestamp_ms"`
	CompletedMillis int64      `json:"completed_ms"`
	Mode            string     `json:"mode"`
	Vertices        []vertexV1 `json:"vertices"`
	States          []stateV1  `json:"states"`
}

type vertexV1 struct {
	ID          int32  `json:"id"`
	Name        string `json:"name"`
	Parallelism int32  `json:"parallelism"`
	// Operators: since version 2.
	Operators []string `json:"operators,omitempty"`
}

type stateV1 struct {
	Vertex   int32    `json:"vertex"`
	Index    int32    `json:"index"`
	Attempt  int32    `json:"attempt"`
	Finished bool     `json:"finished,omitempty"`
	Inline   []byte   `json:"inline,omitempty"`
	Blobs    []blobV1 `json:"blobs,omitempty"`
	// Operators: since version 2.
	Operators []string `json:"operators,omitempty"`
}

type blobV1 struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	CRC  uint32 `json:"crc32c"`
	// Shared: since version 3, and only there (metadata without shared blobs is still version 2).
	Shared bool `json:"shared,omitempty"`
}

// EncodeMetadata validates cp and returns its _metadata object: the envelope around the JSON payload.
func EncodeMetadata(cp *CompletedCheckpoint) ([]byte, error) {
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	m := metaV1{
		ID:              cp.ID,
		TimestampMillis: cp.TimestampMillis,
		CompletedMillis: cp.CompletedMillis,
		Mode:            cp.Mode.String(),
		Vertices:        make([]vertexV1, len(cp.Vertices)),
		States:          make([]stateV1, len(cp.States)),
	}
	for i, v := range cp.Vertices {
		m.Vertices[i] = vertexV1{ID: int32(v.ID), Name: v.Name, Parallelism: v.Parallelism, Operators: v.Operators}
	}
	for i, h := range cp.States {
		s := stateV1{
			Vertex:    int32(h.Attempt.Vertex),
			Index:     h.Attempt.Index,
			Attempt:   h.Attempt.Number,
			Finished:  h.Finished,
			Inline:    h.Inline,
			Operators: h.Operators,
		}
		for _, b := range h.Blobs {
			s.Blobs = append(s.Blobs, blobV1(b))
		}
		m.States[i] = s
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // operator names like "gen -> map" stay readable
	if err := enc.Encode(&m); err != nil {
		return nil, fmt.Errorf("encode metadata of checkpoint %d: %w", cp.ID, err)
	}
	version := writeVersion
	if cp.HasShared() {
		version = 3
	}
	obj, _ := sealVersion(magicMetadata, bytes.TrimSuffix(buf.Bytes(), []byte("\n")), version)
	if len(obj) > MaxMetadataBytes {
		return nil, fmt.Errorf("metadata of checkpoint %d is %d bytes, above the %d-byte limit: keep inline state small",
			cp.ID, len(obj), MaxMetadataBytes)
	}
	return obj, nil
}

// DecodeMetadata verifies a _metadata object read from key and decodes it. A damaged object is a
// *CorruptError, a newer format a *VersionError.
func DecodeMetadata(key string, obj []byte) (*CompletedCheckpoint, error) {
	if len(obj) > MaxMetadataBytes {
		return nil, &CorruptError{Key: key, Problem: ProblemTooLarge,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(obj), MaxMetadataBytes)}
	}
	payload, _, err := open(key, magicMetadata, obj)
	if err != nil {
		return nil, err
	}
	version := binary.LittleEndian.Uint16(obj[4:])
	bad := func(format string, args ...any) error {
		return &CorruptError{Key: key, Problem: ProblemBadPayload, Detail: fmt.Sprintf(format, args...)}
	}
	var m metaV1
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, bad("decode: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("data after the metadata document")
	}
	mode, err := barrier.ParseMode(m.Mode)
	if err != nil {
		return nil, bad("%v", err)
	}
	cp := &CompletedCheckpoint{
		ID:              m.ID,
		TimestampMillis: m.TimestampMillis,
		CompletedMillis: m.CompletedMillis,
		Mode:            mode,
		Vertices:        make([]Vertex, len(m.Vertices)),
		States:          make([]StateHandle, len(m.States)),
	}
	for i, v := range m.Vertices {
		cp.Vertices[i] = Vertex{ID: ident.VertexID(v.ID), Name: v.Name, Parallelism: v.Parallelism, Operators: v.Operators}
	}
	for i, s := range m.States {
		for _, b := range s.Blobs {
			if b.Shared && version < 3 {
				return nil, bad("version %d metadata lists shared blob %q (shared blobs are version 3)", version, b.Key)
			}
		}
		h := StateHandle{
			Attempt: ident.Attempt{
				Subtask: ident.Subtask{Vertex: ident.VertexID(s.Vertex), Index: s.Index},
				Number:  s.Attempt,
			},
			Finished:  s.Finished,
			Inline:    s.Inline,
			Operators: s.Operators,
		}
		for _, b := range s.Blobs {
			h.Blobs = append(h.Blobs, BlobRef(b))
		}
		cp.States[i] = h
	}
	if err := cp.Validate(); err != nil {
		return nil, bad("%v", err)
	}
	return cp, nil
}
