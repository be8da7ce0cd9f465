// Package codec serializes typed records for Runnel's data plane.
//
// It owns the byte encoding of one record: a [Codec] appends the encoding of a value to a buffer and
// decodes one encoding back into a value. Framing (record lengths, buffer headers, events) belongs to
// internal/network, which hands a codec exactly one record's bytes; the codec never sees a frame.
// This package must not import anything else from Runnel: it sits below every other layer, and user
// code implements its interface directly.
//
// The per-record path allocates nothing in steady state. Append allocates only when dst must grow;
// Decode allocates only the memory a decoded value inherently needs: strings, byte slices and slices
// are copied out of src (which is a recycled network buffer) into fresh memory, so decoded values may be
// retained freely. Empty slices and byte slices decode as nil.
//
// Encodings (all integers and floats are fixed-width little-endian, whatever the host):
//
//   - Built-ins ([Int64], [String], ...): the value's bytes and nothing else; int is always 8 bytes.
//     A string or []byte record is its raw bytes (its length is the record's length).
//   - [Pair]: F0 then F1. F0 is preceded by its length as a uvarint unless F0's codec has a fixed
//     size; F1 runs to the end of the record.
//   - [Struct]: the fields in declaration order, nested structs and arrays inline, no padding.
//     Strings, byte slices and values of [encoding.BinaryAppender] types carry a uvarint byte length,
//     other slices a uvarint element count. The last field of the record, when it is a string or a slice
//     of fixed-size elements (numbers, bools, and arrays and structs of them), carries no length or count:
//     it runs to the end of the record.
//   - [Binary]: whatever AppendBinary produces.
//
// Uvarints must be minimal and bools must be 0 or 1, so every value has exactly one encoding.
//
// Codecs are immutable after construction and safe for concurrent use. Decode never panics on
// malformed input: it returns an error wrapping [ErrMalformed]. On error *v is left partly written.
package codec

import (
	"encoding/binary"
	"errors"
	"strings"
	"unsafe"
)

// Codec encodes and decodes values of type T. Implementations must be safe for concurrent use
// by multiple goroutines (they are shared by the parallel subtasks of an operator) — so no mutable scratch state inside.
type Codec[T any] interface {
	// Append appends the encoding of v to dst and returns the extended slice.
	Append(dst []byte, v T) ([]byte, error)
	// Decode decodes one value from src, which holds exactly one encoding produced by Append, into *v.
	// It must not retain src after returning (src is a recycled network buffer).
	// Malformed or truncated input returns an error (wrapped, naming the codec and the problem), never panics.
	Decode(src []byte, v *T) error
}

// ErrMalformed is wrapped by every error that a codec in this package returns from Decode.
var ErrMalformed = errors.New("codec: malformed input")

// ErrUnsupported is wrapped by the error that [Struct] and [For] return for a type they cannot encode.
var ErrUnsupported = errors.New("codec: unsupported type")

// Error describes malformed input found by Decode. errors.Is(err, ErrMalformed) reports true for it.
type Error struct {
	Codec   string // the codec that failed, e.g. "codec.Int64" or "codec.Struct[main.Click]"
	Field   string // path of the field being decoded, e.g. "Items[2].Name"; empty for a whole record
	Problem string // what is wrong, e.g. "want 8 bytes, have 3"
	Err     error  // the cause reported by user code (UnmarshalBinary, a nested codec), if any
}

// Error returns "<codec>: field <path>: malformed input: <problem>[: <cause>]".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Codec)
	if e.Field != "" {
		b.WriteString(": field ")
		b.WriteString(e.Field)
	}
	b.WriteString(": malformed input: ")
	b.WriteString(e.Problem)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns ErrMalformed and the cause, if any.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrMalformed}
	}
	return []error{ErrMalformed, e.Err}
}

// fixedSizer is implemented by the codecs of this package whose encodings all have one length.
// fixedSize returns that length, or -1 when it varies. Pair uses it to omit a length prefix.
type fixedSizer interface {
	fixedSize() int
}

// sizeOf returns c's fixed encoded size, or -1 if it has none or does not say.
func sizeOf(c any) int {
	if f, ok := c.(fixedSizer); ok {
		return f.fixedSize()
	}
	return -1
}

// memoryCopier is implemented by the codecs of this package whose encoding of a value can be its memory.
type memoryCopier interface {
	memoryCopy() bool
}

// IsMemoryCopy reports whether c encodes every T as the T's own memory, byte for byte, on this host, and
// the host loads and stores such values at any offset: a Struct of fixed-size numeric fields without
// padding, or a fixed-width integer or float, on a little-endian host such as amd64 or arm64. The engine
// then moves records of T in and out of network buffers with one typed copy instead of calls to Append and
// Decode; a record of another length than T's size is still malformed (Decode says why).
func IsMemoryCopy[T any](c Codec[T]) bool {
	m, ok := c.(memoryCopier)
	return ok && m.memoryCopy() && unsafe.Sizeof(*new(T)) > 0
}

// hostLittleEndian says the host stores integers least significant byte first, as the encodings do.
var hostLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1
