package codec

import (
	"encoding/binary"
	"math"
	"strconv"
)

// The built-in codecs are empty structs: storing one in a Codec interface allocates nothing, and
// each method is a bounds check and a fixed-width load or store.

// Int64 returns the codec for int64: 8 bytes, little-endian.
func Int64() Codec[int64] { return int64Codec{} }

// Int32 returns the codec for int32: 4 bytes, little-endian.
func Int32() Codec[int32] { return int32Codec{} }

// Int returns the codec for int: 8 bytes, little-endian, on every platform. On a 32-bit platform
// Decode rejects values that do not fit in an int.
func Int() Codec[int] { return intCodec{} }

// Uint64 returns the codec for uint64: 8 bytes, little-endian.
func Uint64() Codec[uint64] { return uint64Codec{} }

// Uint32 returns the codec for uint32: 4 bytes, little-endian.
func Uint32() Codec[uint32] { return uint32Codec{} }

// Float64 returns the codec for float64: the 8 bytes of its IEEE 754 bits, little-endian.
// Every bit pattern, NaN payloads included, round-trips.
func Float64() Codec[float64] { return float64Codec{} }

// Float32 returns the codec for float32: the 4 bytes of its IEEE 754 bits, little-endian.
func Float32() Codec[float32] { return float32Codec{} }

// Bool returns the codec for bool: one byte, 0 or 1.
func Bool() Codec[bool] { return boolCodec{} }

// String returns the codec for string: the string's bytes, unprefixed.
// Decode allocates the string (unless it is empty).
func String() Codec[string] { return stringCodec{} }

// Bytes returns the codec for []byte: the bytes themselves, unprefixed. Decode copies them into a new
// slice, never into the old value of *v, so a decoded slice may be retained; an empty record decodes as nil.
func Bytes() Codec[[]byte] { return bytesCodec{} }

// lengthError reports a fixed-size record of the wrong length.
func lengthError(codec string, want, have int) error {
	return &Error{Codec: codec, Problem: "want " + strconv.Itoa(want) + " bytes, have " + strconv.Itoa(have)}
}

type int64Codec struct{}

func (int64Codec) fixedSize() int { return 8 }

func (int64Codec) memoryCopy() bool { return hostLittleEndian && unalignedOK }

func (int64Codec) Append(dst []byte, v int64) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(dst, uint64(v)), nil
}

func (int64Codec) Decode(src []byte, v *int64) error {
	if len(src) != 8 {
		return lengthError("codec.Int64", 8, len(src))
	}
	*v = int64(binary.LittleEndian.Uint64(src))
	return nil
}

type int32Codec struct{}

func (int32Codec) fixedSize() int { return 4 }

func (int32Codec) memoryCopy() bool { return hostLittleEndian && unalignedOK }

func (int32Codec) Append(dst []byte, v int32) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(dst, uint32(v)), nil
}

func (int32Codec) Decode(src []byte, v *int32) error {
	if len(src) != 4 {
		return lengthError("codec.Int32", 4, len(src))
	}
	*v = int32(binary.LittleEndian.Uint32(src))
	return nil
}

type intCodec struct{}

func (intCodec) fixedSize() int { return 8 }

func (intCodec) Append(dst []byte, v int) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(dst, uint64(int64(v))), nil
}

func (intCodec) Decode(src []byte, v *int) error {
	if len(src) != 8 {
		return lengthError("codec.Int", 8, len(src))
	}
	x := int64(binary.LittleEndian.Uint64(src))
	if int64(int(x)) != x { // only possible where int is 32 bits; compiled away elsewhere
		return &Error{Codec: "codec.Int", Problem: strconv.FormatInt(x, 10) + " overflows int"}
	}
	*v = int(x)
	return nil
}

type uint64Codec struct{}

func (uint64Codec) fixedSize() int { return 8 }

func (uint64Codec) memoryCopy() bool { return hostLittleEndian && unalignedOK }

func (uint64Codec) Append(dst []byte, v uint64) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(dst, v), nil
}

func (uint64Codec) Decode(src []byte, v *uint64) error {
	if len(src) != 8 {
		return lengthError("codec.Uint64", 8, len(src))
	}
	*v = binary.LittleEndian.Uint64(src)
	return nil
}

type uint32Codec struct{}

func (uint32Codec) fixedSize() int { return 4 }

func (uint32Codec) memoryCopy() bool { return hostLittleEndian && unalignedOK }

func (uint32Codec) Append(dst []byte, v uint32) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(dst, v), nil
}

func (uint32Codec) Decode(src []byte, v *uint32) error {
	if len(src) != 4 {
		return lengthError("codec.Uint32", 4, len(src))
	}
	*v = binary.LittleEndian.Uint32(src)
	return nil
}

type float64Codec struct{}

func (float64Codec) fixedSize() int { return 8 }

func (float64Codec) memoryCopy() bool { return hostLittleEndian && unalignedOK }

func (float64Codec) Append(dst []byte, v float64) ([]byte, error) {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v)), nil
}

func (float64Codec) Decode(src []byte, v *float64) error {
	if len(src) != 8 {
		return lengthError("codec.Float64", 8, len(src))
	}
	*v = math.Float64frombits(binary.LittleEndian.Uint64(src))
	return nil
}

type float32Codec struct{}

func (float32Codec) fixedSize() int { return 4 }

func (float32Codec) memoryCopy() bool { return hostLittleEndian && unalignedOK }

func (float32Codec) Append(dst []byte, v float32) ([]byte, error) {
	return binary.LittleEndian.AppendUint32(dst, math.Float32bits(v)), nil
}

func (float32Codec) Decode(src []byte, v *float32) error {
	if len(src) != 4 {
		return lengthError("codec.Float32", 4, len(src))
	}
	*v = math.Float32frombits(binary.LittleEndian.Uint32(src))
	return nil
}

type boolCodec struct{}

func (boolCodec) fixedSize() int { return 1 }

func (boolCodec) Append(dst []byte, v bool) ([]byte, error) {
	var b byte
	if v {
		b = 1
	}
	return append(dst, b), nil
}

func (boolCodec) Decode(src []byte, v *bool) error {
	if len(src) != 1 {
		return lengthError("codec.Bool", 1, len(src))
	}
	if src[0] > 1 {
		return &Error{Codec: "codec.Bool", Problem: "bool byte " + strconv.Itoa(int(src[0])) + " is neither 0 nor 1"}
	}
	*v = src[0] == 1
	return nil
}

type stringCodec struct{}

func (stringCodec) fixedSize() int { return -1 }

func (stringCodec) Append(dst []byte, v string) ([]byte, error) {
	return append(dst, v...), nil
}

func (stringCodec) Decode(src []byte, v *string) error {
	*v = string(src)
	return nil
}

type bytesCodec struct{}

func (bytesCodec) fixedSize() int { return -1 }

func (bytesCodec) Append(dst []byte, v []byte) ([]byte, error) {
	return append(dst, v...), nil
}

func (bytesCodec) Decode(src []byte, v *[]byte) error {
	*v = cloneBytes(src)
	return nil
}

// cloneBytes returns a copy of b in new memory, or nil if b is empty.
func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
