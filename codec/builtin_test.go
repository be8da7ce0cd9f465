package codec

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
)

func TestBuiltinRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T) []byte // round-trips one value, returns its encoding
		want string                    // the encoding, in hex
	}{
		{"int64 zero", func(t *testing.T) []byte { return checkCodec(t, Int64(), 0) }, "0000000000000000"},
		{"int64 -2", func(t *testing.T) []byte { return checkCodec(t, Int64(), -2) }, "feffffffffffffff"},
		{"int64 max", func(t *testing.T) []byte { return checkCodec(t, Int64(), math.MaxInt64) }, "ffffffffffffff7f"},
		{"int64 min", func(t *testing.T) []byte { return checkCodec(t, Int64(), math.MinInt64) }, "0000000000000080"},
		{"int32", func(t *testing.T) []byte { return checkCodec(t, Int32(), 0x01020304) }, "04030201"},
		{"int32 min", func(t *testing.T) []byte { return checkCodec(t, Int32(), math.MinInt32) }, "00000080"},
		{"int", func(t *testing.T) []byte { return checkCodec(t, Int(), -1) }, "ffffffffffffffff"},
		{"int max32", func(t *testing.T) []byte { return checkCodec(t, Int(), math.MaxInt32) }, "ffffff7f00000000"},
		{"uint64", func(t *testing.T) []byte { return checkCodec(t, Uint64(), math.MaxUint64) }, "ffffffffffffffff"},
		{"uint32", func(t *testing.T) []byte { return checkCodec(t, Uint32(), 7) }, "07000000"},
		{"float64", func(t *testing.T) []byte { return checkCodec(t, Float64(), 1.5) }, "000000000000f83f"},
		{"float64 -inf", func(t *testing.T) []byte { return checkCodec(t, Float64(), math.Inf(-1)) }, "000000000000f0ff"},
		{"float64 -0", func(t *testing.T) []byte { return checkCodec(t, Float64(), math.Copysign(0, -1)) }, "0000000000000080"},
		{"float32", func(t *testing.T) []byte { return checkCodec(t, Float32(), -2) }, "000000c0"},
		{"bool true", func(t *testing.T) []byte { return checkCodec(t, Bool(), true) }, "01"},
		{"bool false", func(t *testing.T) []byte { return checkCodec(t, Bool(), false) }, "00"},
		{"string", func(t *testing.T) []byte { return checkCodec(t, String(), "héllo") }, "68c3a96c6c6f"},
		{"string empty", func(t *testing.T) []byte { return checkCodec(t, String(), "") }, ""},
		{"string invalid utf8", func(t *testing.T) []byte { return checkCodec(t, String(), "\xff\x00") }, "ff00"},
		{"bytes", func(t *testing.T) []byte { return checkCodec(t, Bytes(), []byte{1, 2, 3}) }, "010203"},
		{"bytes nil", func(t *testing.T) []byte { return checkCodec(t, Bytes(), nil) }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hex.EncodeToString(tt.run(t)); got != tt.want {
				t.Errorf("encoding = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestFloatNaNBitsRoundTrip(t *testing.T) {
	for _, bits := range []uint64{0x7ff8000000000001, 0xfff0000000000001, 0x7ff4000000000000} {
		b, _ := Float64().Append(nil, math.Float64frombits(bits))
		var f float64
		if err := Float64().Decode(b, &f); err != nil || math.Float64bits(f) != bits {
			t.Errorf("NaN %#x: decoded %#x, %v", bits, math.Float64bits(f), err)
		}
	}
	for _, bits := range []uint32{0x7fc00001, 0xff800001} {
		b, _ := Float32().Append(nil, math.Float32frombits(bits))
		var f float32
		if err := Float32().Decode(b, &f); err != nil || math.Float32bits(f) != bits {
			t.Errorf("NaN %#x: decoded %#x, %v", bits, math.Float32bits(f), err)
		}
	}
}

func TestBuiltinWrongLength(t *testing.T) {
	tests := []struct {
		name    string
		decode  func([]byte) error
		size    int
		wantMsg string // for the input one byte short
	}{
		{"int64", func(b []byte) error { var v int64; return Int64().Decode(b, &v) }, 8, "codec.Int64: malformed input: want 8 bytes, have 7"},
		{"int32", func(b []byte) error { var v int32; return Int32().Decode(b, &v) }, 4, "codec.Int32: malformed input: want 4 bytes, have 3"},
		{"int", func(b []byte) error { var v int; return Int().Decode(b, &v) }, 8, "codec.Int: malformed input: want 8 bytes, have 7"},
		{"uint64", func(b []byte) error { var v uint64; return Uint64().Decode(b, &v) }, 8, "codec.Uint64: malformed input: want 8 bytes, have 7"},
		{"uint32", func(b []byte) error { var v uint32; return Uint32().Decode(b, &v) }, 4, "codec.Uint32: malformed input: want 4 bytes, have 3"},
		{"float64", func(b []byte) error { var v float64; return Float64().Decode(b, &v) }, 8, "codec.Float64: malformed input: want 8 bytes, have 7"},
		{"float32", func(b []byte) error { var v float32; return Float32().Decode(b, &v) }, 4, "codec.Float32: malformed input: want 4 bytes, have 3"},
		{"bool", func(b []byte) error { var v bool; return Bool().Decode(b, &v) }, 1, "codec.Bool: malformed input: want 1 bytes, have 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for n := range tt.size + 3 {
				err := tt.decode(make([]byte, n))
				if n == tt.size {
					if err != nil {
						t.Errorf("%d bytes: %v", n, err)
					}
					continue
				}
				if !errors.Is(err, ErrMalformed) {
					t.Errorf("%d bytes: err = %v, want ErrMalformed", n, err)
				}
				if n == tt.size-1 && err.Error() != tt.wantMsg {
					t.Errorf("%d bytes: message %q, want %q", n, err, tt.wantMsg)
				}
			}
		})
	}
}

func TestBoolRejectsOtherBytes(t *testing.T) {
	var v bool
	err := Bool().Decode([]byte{2}, &v)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "neither 0 nor 1") {
		t.Errorf("Decode([2]) = %v", err)
	}
}

func TestBytesDecodeCopies(t *testing.T) {
	src := []byte{1, 2, 3}
	var got []byte
	if err := Bytes().Decode(src, &got); err != nil {
		t.Fatal(err)
	}
	src[0] = 9 // the network buffer is recycled
	if got[0] != 1 {
		t.Errorf("decoded bytes alias src")
	}
	prev := got
	if err := Bytes().Decode([]byte{7}, &got); err != nil {
		t.Fatal(err)
	}
	if prev[0] != 1 {
		t.Errorf("Decode wrote into the old value's memory")
	}
}

func TestIsMemoryCopy(t *testing.T) {
	type flat struct{ A, B int64 }
	type padded struct {
		A int8
		B int64
	}
	type withString struct {
		A int64
		S string
	}
	little := binary.NativeEndian.Uint16([]byte{1, 0}) == 1 && (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64")
	for _, tc := range []struct {
		name string
		got  bool
		want bool
	}{
		{"Int64", IsMemoryCopy(Int64()), little},
		{"Uint32", IsMemoryCopy(Uint32()), little},
		{"Float64", IsMemoryCopy(Float64()), little},
		{"Bool (only 0 and 1 are valid)", IsMemoryCopy(Bool()), false},
		{"Int (its size depends on the host)", IsMemoryCopy(Int()), false},
		{"String", IsMemoryCopy(String()), false},
		{"Struct of int64s", IsMemoryCopy(MustStruct[flat]()), little},
		{"Struct with padding", IsMemoryCopy(MustStruct[padded]()), false},
		{"Struct with a string", IsMemoryCopy(MustStruct[withString]()), false},
		{"empty Struct", IsMemoryCopy(MustStruct[struct{}]()), false},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: IsMemoryCopy = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}
