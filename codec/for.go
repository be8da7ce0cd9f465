package codec

import "reflect"

// For returns a codec for T, for when the user did not choose one:
//
//   - the built-in codec for int64, int32, int, uint64, uint32, float64, float32, bool, string and []byte;
//   - a [Binary] codec when *T implements encoding.BinaryAppender and encoding.BinaryUnmarshaler;
//   - otherwise a codec built like [Struct]'s by walking T once, which also serves named basic types
//     (type UserID int64), arrays and slices. Its encoding of a named basic type is that of the
//     built-in codec of the underlying type.
//
// The error, which wraps ErrUnsupported, names the offending field and its type and says how to fix it.
func For[T any]() (Codec[T], error) {
	var c any
	switch any((*T)(nil)).(type) {
	case *int64:
		c = Int64()
	case *int32:
		c = Int32()
	case *int:
		c = Int()
	case *uint64:
		c = Uint64()
	case *uint32:
		c = Uint32()
	case *float64:
		c = Float64()
	case *float32:
		c = Float32()
	case *bool:
		c = Bool()
	case *string:
		c = String()
	case *[]byte:
		c = Bytes()
	}
	if c != nil {
		return c.(Codec[T]), nil
	}
	t := reflect.TypeFor[T]()
	name := "codec.For[" + t.String() + "]"
	if isBinary(t) {
		return binaryIfaceCodec[T]{name: name}, nil
	}
	return newPlanCodec[T](name, littleEndian)
}
