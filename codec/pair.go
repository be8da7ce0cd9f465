package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"strconv"
)

// Tuple2 is a pair of values, the record type of keyed streams and joins.
type Tuple2[A, B any] struct {
	F0 A
	F1 B
}

// Pair returns a codec for Tuple2[A, B] built from a codec for each field. The encoding is F0's
// encoding, preceded by its length as a uvarint unless a has a fixed size (the built-in numeric codecs,
// and Struct codecs of types without strings or slices), followed by F1's encoding, which runs to the
// end of the record. A Pair of two fixed-size codecs is itself fixed-size, so nested pairs stay compact.
func Pair[A, B any](a Codec[A], b Codec[B]) Codec[Tuple2[A, B]] {
	c := &pairCodec[A, B]{
		name:  "codec.Pair[" + reflect.TypeFor[A]().String() + "," + reflect.TypeFor[B]().String() + "]",
		a:     a,
		b:     b,
		aSize: sizeOf(a),
		size:  -1,
	}
	if bSize := sizeOf(b); c.aSize >= 0 && bSize >= 0 {
		c.size = c.aSize + bSize
	}
	return c
}

type pairCodec[A, B any] struct {
	name  string
	a     Codec[A]
	b     Codec[B]
	aSize int // a's fixed encoded size, or -1: F0 is then length-prefixed
	size  int // the pair's fixed encoded size, or -1
}

func (c *pairCodec[A, B]) fixedSize() int { return c.size }

func (c *pairCodec[A, B]) Append(dst []byte, v Tuple2[A, B]) ([]byte, error) {
	var err error
	if c.aSize >= 0 {
		dst, err = c.a.Append(dst, v.F0)
	} else {
		start := len(dst)
		dst = append(dst, 0) // room for a one-byte length; finishPrefix widens it if needed
		dst, err = c.a.Append(dst, v.F0)
		if err == nil {
			dst = finishPrefix(dst, start)
		}
	}
	if err != nil {
		return dst, fmt.Errorf("%s: field F0: %w", c.name, err)
	}
	if dst, err = c.b.Append(dst, v.F1); err != nil {
		return dst, fmt.Errorf("%s: field F1: %w", c.name, err)
	}
	return dst, nil
}

func (c *pairCodec[A, B]) Decode(src []byte, v *Tuple2[A, B]) error {
	n, body := c.aSize, src
	if n < 0 {
		var k int
		n, k = readLen(src)
		if k <= 0 {
			return &Error{Codec: c.name, Field: "F0", Problem: lenProblem(k)}
		}
		body = src[k:]
	}
	if n > len(body) {
		return &Error{Codec: c.name, Field: "F0", Problem: "truncated: want " + strconv.Itoa(n) + " bytes, have " + strconv.Itoa(len(body))}
	}
	if err := c.a.Decode(body[:n], &v.F0); err != nil {
		return nestedError(c.name, "F0", err)
	}
	if err := c.b.Decode(body[n:], &v.F1); err != nil {
		return nestedError(c.name, "F1", err)
	}
	return nil
}

// nestedError wraps an error from a nested codec's Decode, making sure it wraps ErrMalformed
// even when the nested codec is user code that does not.
func nestedError(codec, field string, err error) error {
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%s: field %s: %w", codec, field, err)
	}
	return &Error{Codec: codec, Field: field, Problem: "nested codec failed", Err: err}
}

// finishPrefix completes a length prefix begun by reserving the byte dst[start]: it writes the length
// of dst[start+1:] there as a uvarint, moving those bytes right when the uvarint needs more than one
// byte (bodies of 128 bytes or more).
func finishPrefix(dst []byte, start int) []byte {
	n := len(dst) - start - 1
	if n < 0x80 {
		dst[start] = byte(n)
		return dst
	}
	w := uvarintLen(uint64(n))
	dst = append(dst, make([]byte, w-1)...)
	copy(dst[start+w:], dst[start+1:start+1+n])
	binary.PutUvarint(dst[start:], uint64(n))
	return dst
}

// uvarintLen returns the number of bytes binary.AppendUvarint uses for x.
func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// readUvarint reads a minimal uvarint from the front of src. It returns the value and the number of
// bytes read; k == 0 means src ended inside the uvarint, k < 0 that it overflows 64 bits or is not
// minimal (has superfluous trailing zero groups), which would give one value two encodings.
func readUvarint(src []byte) (x uint64, k int) {
	if len(src) > 0 && src[0] < 0x80 { // the common case: one byte
		return uint64(src[0]), 1
	}
	x, k = binary.Uvarint(src)
	if k > 1 && src[k-1] == 0 {
		return 0, -1
	}
	return x, k
}

// readLen reads a uvarint length that must fit in an int; see readUvarint for k.
func readLen(src []byte) (n, k int) {
	x, k := readUvarint(src)
	if k > 0 && x > uint64(maxInt) {
		return 0, -1
	}
	return int(x), k
}

const maxInt = int(^uint(0) >> 1)

// lenProblem describes a failed readUvarint or readLen.
func lenProblem(k int) string {
	if k == 0 {
		return "truncated length prefix"
	}
	return "invalid length prefix (overlong, overflowing or not minimal)"
}
