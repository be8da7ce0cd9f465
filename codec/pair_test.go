package codec

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestPair(t *testing.T) {
	type fixedStruct struct{ A, B int32 }
	tests := []struct {
		name string
		run  func(t *testing.T) []byte
		want string // hex; "" to skip
	}{
		{"fixed, fixed", func(t *testing.T) []byte {
			c := Pair(Int64(), Float32())
			if sizeOf(c) != 12 {
				t.Errorf("fixed size %d, want 12", sizeOf(c))
			}
			return checkCodec(t, c, Tuple2[int64, float32]{-1, 2})
		}, "ffffffffffffffff" + "00000040"},
		{"fixed, string", func(t *testing.T) []byte {
			return checkCodec(t, Pair(Int32(), String()), Tuple2[int32, string]{1, "ab"})
		}, "01000000" + "6162"},
		{"string, fixed", func(t *testing.T) []byte {
			return checkCodec(t, Pair(String(), Int32()), Tuple2[string, int32]{"ab", 1})
		}, "02" + "6162" + "01000000"},
		{"empty string key", func(t *testing.T) []byte {
			return checkCodec(t, Pair(String(), String()), Tuple2[string, string]{"", "v"})
		}, "00" + "76"},
		{"bytes, bytes", func(t *testing.T) []byte {
			return checkCodec(t, Pair(Bytes(), Bytes()), Tuple2[[]byte, []byte]{[]byte{1}, nil})
		}, "01" + "01"},
		{"fixed struct key has no prefix", func(t *testing.T) []byte {
			return checkCodec(t, Pair(MustStruct[fixedStruct](), Bool()), Tuple2[fixedStruct, bool]{fixedStruct{1, 2}, true})
		}, "01000000" + "02000000" + "01"},
		{"nested fixed pair has no prefix", func(t *testing.T) []byte {
			return checkCodec(t, Pair(Pair(Int32(), Bool()), String()), Tuple2[Tuple2[int32, bool], string]{Tuple2[int32, bool]{7, false}, "x"})
		}, "07000000" + "00" + "78"},
		{"nested variable pair", func(t *testing.T) []byte {
			c := Pair(Pair(String(), Int32()), Pair(String(), String()))
			return checkCodec(t, c, Tuple2[Tuple2[string, int32], Tuple2[string, string]]{
				Tuple2[string, int32]{"k", 2}, Tuple2[string, string]{"a", "b"}})
		}, "06" + "01" + "6b" + "02000000" + "01" + "61" + "62"},
		{"long key, 2-byte prefix", func(t *testing.T) []byte {
			return checkCodec(t, Pair(String(), Int64()), Tuple2[string, int64]{strings.Repeat("k", 200), 9})
		}, ""},
		{"long key, 3-byte prefix", func(t *testing.T) []byte {
			return checkRoundTrip(t, Pair(String(), Int64()), Tuple2[string, int64]{strings.Repeat("k", 20000), 9})
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.run(t)
			if tt.want != "" {
				if got := hex.EncodeToString(b); got != tt.want {
					t.Errorf("encoding %s, want %s", got, tt.want)
				}
			}
		})
	}
}

func TestPairLongKeyPrefix(t *testing.T) {
	for _, n := range []int{127, 128, 16383, 16384, 70000} {
		b, err := Pair(String(), Int32()).Append([]byte{0xaa}, Tuple2[string, int32]{strings.Repeat("k", n), 5})
		if err != nil {
			t.Fatal(err)
		}
		l, k := binary.Uvarint(b[1:])
		if int(l) != n || k != uvarintLen(uint64(n)) || len(b) != 1+k+n+4 || b[0] != 0xaa {
			t.Errorf("key of %d bytes: prefix %d (%d bytes), total %d", n, l, k, len(b))
		}
		if b[1+k] != 'k' || b[k+n] != 'k' || b[1+k+n] != 5 {
			t.Errorf("key of %d bytes: body misplaced", n)
		}
	}
}

func TestPairDecodeErrors(t *testing.T) {
	ps := Pair(String(), Int32())
	pf := Pair(Int64(), Int32())
	tests := []struct {
		name   string
		decode func([]byte) error
		src    string
		want   string
	}{
		{"no prefix", decodeFunc(ps), "", "codec.Pair[string,int32]: field F0: malformed input: truncated length prefix"},
		{"prefix too long", decodeFunc(ps), "05" + "6161", "codec.Pair[string,int32]: field F0: malformed input: truncated: want 5 bytes, have 2"},
		{"not minimal", decodeFunc(ps), "8100" + "61" + "01000000", "codec.Pair[string,int32]: field F0: malformed input: invalid length prefix (overlong, overflowing or not minimal)"},
		{"second field short", decodeFunc(ps), "01" + "61" + "0100", "codec.Pair[string,int32]: field F1: codec.Int32: malformed input: want 4 bytes, have 2"},
		{"fixed first short", decodeFunc(pf), "0102", "codec.Pair[int64,int32]: field F0: malformed input: truncated: want 8 bytes, have 2"},
		{"fixed second long", decodeFunc(pf), "0000000000000000" + "0000000000", "codec.Pair[int64,int32]: field F1: codec.Int32: malformed input: want 4 bytes, have 5"},
		{"user codec error", decodeFunc(Pair(Int32(), Codec[string](failing{}))), "00000000", "codec.Pair[int32,string]: field F1: malformed input: nested codec failed: no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, _ := hex.DecodeString(tt.src)
			err := tt.decode(src)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if err.Error() != tt.want {
				t.Errorf("message\n%q\nwant\n%q", err, tt.want)
			}
		})
	}
}

func decodeFunc[T any](c Codec[T]) func([]byte) error {
	return func(b []byte) error {
		var v T
		return c.Decode(b, &v)
	}
}

// failing is a user codec whose Decode fails with an error of its own.
type failing struct{}

func (failing) Append(dst []byte, v string) ([]byte, error) { return nil, errors.New("no") }
func (failing) Decode(src []byte, v *string) error          { return errors.New("no") }

func TestPairAppendError(t *testing.T) {
	_, err := Pair(Int32(), Codec[string](failing{})).Append(nil, Tuple2[int32, string]{})
	if err == nil || err.Error() != "codec.Pair[int32,string]: field F1: no" {
		t.Errorf("err = %v", err)
	}
}
