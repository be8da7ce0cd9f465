package codec

import (
	"encoding"
	"fmt"
	"reflect"
)

// BinaryPointer is the constraint of [Binary]: PT is *T, and *T (directly, or through value-receiver
// methods of T) implements AppendBinary and UnmarshalBinary.
type BinaryPointer[T any] interface {
	*T
	encoding.BinaryAppender
	encoding.BinaryUnmarshaler
}

// Binary returns a codec for a type that encodes itself: the encoding is what AppendBinary appends,
// and Decode calls UnmarshalBinary with exactly those bytes (which, as encoding.BinaryUnmarshaler
// requires, it must copy if it keeps them). Call it as codec.Binary[T](); PT is inferred.
//
// Append passes a pointer to its copy of v to AppendBinary through an interface, so the copy escapes
// to the heap: one allocation per Append unless the compiler can see through the method.
// Errors from UnmarshalBinary are wrapped together with ErrMalformed.
func Binary[T any, PT BinaryPointer[T]]() Codec[T] {
	return binaryCodec[T, PT]{name: "codec.Binary[" + reflect.TypeFor[T]().String() + "]"}
}

type binaryCodec[T any, PT BinaryPointer[T]] struct{ name string }

func (c binaryCodec[T, PT]) fixedSize() int { return -1 }

func (c binaryCodec[T, PT]) Append(dst []byte, v T) ([]byte, error) {
	out, err := PT(&v).AppendBinary(dst)
	if err != nil {
		return dst, fmt.Errorf("%s: AppendBinary: %w", c.name, err)
	}
	return out, nil
}

func (c binaryCodec[T, PT]) Decode(src []byte, v *T) error {
	if err := PT(v).UnmarshalBinary(src); err != nil {
		return &Error{Codec: c.name, Problem: "UnmarshalBinary failed", Err: err}
	}
	return nil
}

// binaryIfaceCodec is what For returns for a type whose pointer implements encoding.BinaryAppender
// and encoding.BinaryUnmarshaler, which For can only see at run time. The encoding is Binary's.
type binaryIfaceCodec[T any] struct{ name string }

func (c binaryIfaceCodec[T]) fixedSize() int { return -1 }

func (c binaryIfaceCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	out, err := any(&v).(encoding.BinaryAppender).AppendBinary(dst)
	if err != nil {
		return dst, fmt.Errorf("%s: AppendBinary: %w", c.name, err)
	}
	return out, nil
}

func (c binaryIfaceCodec[T]) Decode(src []byte, v *T) error {
	if err := any(v).(encoding.BinaryUnmarshaler).UnmarshalBinary(src); err != nil {
		return &Error{Codec: c.name, Problem: "UnmarshalBinary failed", Err: err}
	}
	return nil
}

var (
	appenderType    = reflect.TypeFor[encoding.BinaryAppender]()
	unmarshalerType = reflect.TypeFor[encoding.BinaryUnmarshaler]()
)

// isBinary reports whether values of t encode themselves: *t implements both
// encoding.BinaryAppender and encoding.BinaryUnmarshaler.
func isBinary(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(appenderType) && pt.Implements(unmarshalerType)
}
