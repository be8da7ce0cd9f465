package codec

import (
	"encoding/hex"
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// numeric has only fixed-size numeric fields, with padding between some of them.
type numeric struct {
	A int64
	B int32
	c uint16 // unexported
	D int8
	E float64
	F float32
	G uint64
	H uint8
	I int
	J uint
	K uintptr
	L [3]int16
	M struct{ P, Q int32 }
	N bool
}

type point struct{ X, Y float64 }

type userID int64

type inner struct {
	Name  string
	Tags  []string
	Score float32
	when  time.Time // a Binary type, reached through a slice when inner is a slice element
}

// record exercises every supported kind.
type record struct {
	ID       userID
	url      string // unexported
	At       time.Time
	Addr     netip.Addr
	OK       bool
	Data     []byte
	Points   []point // raw slice elements
	Inner    inner
	Inners   []inner
	Grid     [2][3]uint8
	Names    [2]string
	Many     [70]string // too many ops to flatten: one opArray
	Nested   [][]int32
	Flags    []bool
	Pairs    [2]struct{ K, V string }
	Ints     []int
	Empty    struct{}
	_        [0]func() // the non-comparable idiom encodes nothing
	Neg      int16
	Last     string // runs to the end of the record
	embedded        // embedded struct: its fields are inline
}

type embedded struct{ E1, E2 uint32 }

// node is recursive through a slice.
type node struct {
	Val  int32
	Kids []node
}

func sampleRecord() record {
	r := record{
		ID:     42,
		url:    "https://example.com/a",
		At:     time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC),
		Addr:   netip.MustParseAddr("10.1.2.3"),
		OK:     true,
		Data:   []byte{0, 1, 2, 255},
		Points: []point{{1, 2}, {math.Inf(1), -0.5}},
		Inner:  inner{Name: "in", Tags: []string{"a", "", "ccc"}, Score: 2.5},
		Inners: []inner{
			{Name: "x", when: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)},
			{Tags: []string{strings.Repeat("t", 300)}},
		},
		Grid:     [2][3]uint8{{1, 2, 3}, {4, 5, 6}},
		Names:    [2]string{"n0", "n1"},
		Nested:   [][]int32{{1, 2}, nil, {-3}},
		Flags:    []bool{true, false, true},
		Pairs:    [2]struct{ K, V string }{{"k", "v"}, {"", "w"}},
		Ints:     []int{-1, 0, math.MaxInt},
		Neg:      -7,
		Last:     "the end",
		embedded: embedded{E1: 1, E2: 2},
	}
	for i := range r.Many {
		r.Many[i] = strings.Repeat("m", i%5)
	}
	return r
}

func TestStructRoundTrip(t *testing.T) {
	full := sampleRecord()
	tests := []struct {
		name string
		v    record
	}{
		{"zero", record{}},
		{"full", full},
		{"long strings", record{url: strings.Repeat("u", 20000), Last: strings.Repeat("z", 200), Data: make([]byte, 130)}},
	}
	c := MustStruct[record]()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := checkRoundTrip(t, c, tt.v)
			if testing.Short() && len(b) > 1000 {
				return
			}
			checkDamaged(t, c, b)
		})
	}
}

func TestStructNumeric(t *testing.T) {
	c := MustStruct[numeric]()
	v := numeric{A: -1, B: 2, c: 3, D: -4, E: 5.5, F: -6.25, G: math.MaxUint64, H: 8, I: -9, J: 10, K: 11,
		L: [3]int16{-1, 0, 1}, M: struct{ P, Q int32 }{12, 13}, N: true}
	b := checkCodec(t, c, v)
	// 8+4+2+1+8+4+8+1+8+8+8+6+8+1 bytes, in field order, no padding.
	if want := 75; len(b) != want || sizeOf(c) != want {
		t.Errorf("encoding is %d bytes, fixed size %d; want %d", len(b), sizeOf(c), want)
	}
	if b[0] != 0xff || b[8] != 2 || b[12] != 3 || b[14] != 0xfc {
		t.Errorf("encoding % x does not start with A, B, c, D", b)
	}
	checkCodec(t, c, numeric{})
}

// TestStructKnownEncoding pins the byte layout of a small struct.
func TestStructKnownEncoding(t *testing.T) {
	type small struct {
		A    uint16
		S    string
		B    []byte
		N    []int16
		Tail []uint16
	}
	c := MustStruct[small]()
	b := checkCodec(t, c, small{A: 0x0102, S: "hi", B: []byte{9}, N: []int16{-1}, Tail: []uint16{3, 4}})
	want := "0201" + "02" + "6869" + "01" + "09" + "01" + "ffff" + "0300" + "0400"
	if got := hex.EncodeToString(b); got != want {
		t.Errorf("encoding %s, want %s", got, want)
	}
}

func TestStructRecursive(t *testing.T) {
	c := MustStruct[node]()
	v := node{Val: 1, Kids: []node{{Val: 2}, {Val: 3, Kids: []node{{Val: 4}}}}}
	checkCodec(t, c, v)

	deep := node{}
	for range maxDepth + 1 {
		deep = node{Kids: []node{deep}}
	}
	if _, err := c.Append(nil, deep); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("Append of a %d-deep tree: err = %v, want a nesting error", maxDepth+1, err)
	}
	// A hostile record nesting deeper than maxDepth: int32 0, count 1, int32 0, count 1, ...
	var src []byte
	for range maxDepth + 2 {
		src = append(src, 0, 0, 0, 0, 1)
	}
	var got node
	if err := c.Decode(src, &got); !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("Decode of deep input: err = %v, want a nesting error", err)
	}
}

// TestStructPortableLayout checks that the plans a big-endian host would use (no memory copies of
// numeric runs) produce the same bytes as the little-endian plans used here.
func TestStructPortableLayout(t *testing.T) {
	check := func(t *testing.T, fast, portable []byte) {
		t.Helper()
		if hex.EncodeToString(fast) != hex.EncodeToString(portable) {
			t.Errorf("encodings differ:\nraw      % x\nportable % x", fast, portable)
		}
	}
	t.Run("record", func(t *testing.T) {
		raw, _ := newPlanCodec[record]("raw", littleEndian)
		portable, _ := newPlanCodec[record]("portable", false)
		v := sampleRecord()
		a, _ := raw.Append(nil, v)
		checkRoundTrip(t, portable, v)
		b, _ := portable.Append(nil, v)
		check(t, a, b)
	})
	t.Run("fuzzRecord", func(t *testing.T) {
		raw, _ := newPlanCodec[fuzzRecord]("raw", littleEndian)
		portable, _ := newPlanCodec[fuzzRecord]("portable", false)
		v := fuzzRecord{A: 1, S: "s", Raw: []uint32{1}, Pts: [2]point{{1, 2}, {3, 4}}, Tail: []byte("tail")}
		a, _ := raw.Append(nil, v)
		b := checkCodec(t, portable, v)
		check(t, a, b)
	})
	t.Run("last slices", func(t *testing.T) {
		type lastBools struct {
			A     int8
			Flags []bool
		}
		type lastInts struct {
			A    int8
			Ints []int16
		}
		raw, _ := newPlanCodec[lastBools]("raw", littleEndian)
		portable, _ := newPlanCodec[lastBools]("portable", false)
		v := lastBools{A: 1, Flags: []bool{true, false}}
		a := checkCodec(t, raw, v)
		check(t, a, checkCodec(t, portable, v))
		if len(a) != 3 {
			t.Errorf("encoding % x: the last slice should carry no count", a)
		}
		rawI, _ := newPlanCodec[lastInts]("raw", littleEndian)
		portableI, _ := newPlanCodec[lastInts]("portable", false)
		vi := lastInts{A: 1, Ints: []int16{-1, 2}}
		a = checkCodec(t, rawI, vi)
		check(t, a, checkCodec(t, portableI, vi))
		if len(a) != 5 {
			t.Errorf("encoding % x: the last slice should carry no count", a)
		}
	})
	t.Run("numeric", func(t *testing.T) {
		raw, _ := newPlanCodec[numeric]("raw", littleEndian)
		portable, _ := newPlanCodec[numeric]("portable", false)
		v := numeric{A: 1, B: 2, c: 3, D: 4, E: 5, F: 6, G: 7, H: 8, I: 9, J: 10, K: 11, L: [3]int16{12, 13, 14}}
		a, _ := raw.Append(nil, v)
		b := checkCodec(t, portable, v)
		check(t, a, b)
	})
}

func TestStructDecodeErrors(t *testing.T) {
	type withString struct {
		A int32
		S string
		B bool
	}
	type withSlice struct {
		Items []point
		Names []string
		End   int8
	}
	tests := []struct {
		name   string
		decode func([]byte) error
		src    string // hex
		want   string
	}{
		{"fixed size, short", decodeWith[numeric](), "00", "codec.Struct[codec.numeric]: malformed input: want 75 bytes, have 1"},
		{"string length truncated", decodeWith[withString](), "01000000" + "05" + "6869", "codec.Struct[codec.withString]: field S: malformed input: truncated: want 5 bytes, have 2"},
		{"string length missing", decodeWith[withString](), "01000000", "codec.Struct[codec.withString]: field S: malformed input: truncated length prefix"},
		{"length not minimal", decodeWith[withString](), "01000000" + "8000" + "00", "codec.Struct[codec.withString]: field S: malformed input: invalid length prefix (overlong, overflowing or not minimal)"},
		{"length overflows", decodeWith[withString](), "01000000" + "ffffffffffffffffff7f", "codec.Struct[codec.withString]: field S: malformed input: invalid length prefix (overlong, overflowing or not minimal)"},
		{"bad bool", decodeWith[withString](), "01000000" + "00" + "07", "codec.Struct[codec.withString]: field B: malformed input: bool byte 7 is neither 0 nor 1"},
		{"trailing bytes", decodeWith[withString](), "01000000" + "00" + "01" + "9999", "codec.Struct[codec.withString]: malformed input: 2 trailing bytes"},
		{"truncated int", decodeWith[withString](), "0100", "codec.Struct[codec.withString]: field A: malformed input: truncated: want 4 bytes, have 2"},
		{"raw slice count too big", decodeWith[withSlice](), "02" + "0000000000000000", "codec.Struct[codec.withSlice]: field Items: malformed input: truncated: 2 elements of 16 bytes or more, have 8 bytes"},
		{"huge count", decodeWith[withSlice](), "00" + "ffffffff07" + "00", "codec.Struct[codec.withSlice]: field Names: malformed input: truncated: 2147483647 elements of 1 bytes or more, have 1 bytes"},
		{"element error has index", decodeWith[withSlice](), "00" + "02" + "0161" + "05" + "00", "codec.Struct[codec.withSlice]: field Names[1]: malformed input: truncated: want 5 bytes, have 1"},
		{"binary field", decodeWith[struct{ T time.Time }](), "01" + "ff", "codec.Struct[struct { T time.Time }]: field T: malformed input: UnmarshalBinary failed: Time.UnmarshalBinary: unsupported version"},
		{"raw rest not whole", decodeWith[struct{ A []uint32 }](), "010203", "codec.Struct[struct { A []uint32 }]: field A: malformed input: 3 bytes is not a whole number of 4-byte elements"},
		{"nested element error", decodeWith[node](), "00000000" + "02" + "00000000" + "00" + "00000000" + "03" + "0000", "codec.Struct[codec.node]: field Kids[1].Kids: malformed input: truncated: 3 elements of 5 bytes or more, have 2 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := hex.DecodeString(tt.src)
			if err != nil {
				t.Fatal(err)
			}
			err = tt.decode(src)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
			if err.Error() != tt.want {
				t.Errorf("message\n%q\nwant\n%q", err, tt.want)
			}
		})
	}
}

// hugeBinary is small on the wire and large in memory.
type hugeBinary struct{ big [1 << 16]byte }

func (h *hugeBinary) AppendBinary(b []byte) ([]byte, error) { return append(b, h.big[0]), nil }
func (h *hugeBinary) UnmarshalBinary(b []byte) error {
	if len(b) != 1 {
		return errors.New("want 1 byte")
	}
	h.big[0] = b[0]
	return nil
}

func TestStructDecodeMemoryBound(t *testing.T) {
	type r struct{ H []hugeBinary }
	c := MustStruct[r]()
	checkRoundTrip(t, c, r{H: make([]hugeBinary, 3)})
	checkRoundTrip(t, c, r{H: make([]hugeBinary, 15)})      // 1 MB in memory from 31 bytes: within the slack
	src, _ := c.Append(nil, r{H: make([]hugeBinary, 1000)}) // 2 kB on the wire, 64 MB in memory
	var v r
	err := c.Decode(src, &v)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "exceed the decoding memory bound") {
		t.Errorf("err = %v, want the memory bound", err)
	}
}

func TestIntOverflowOn32Bit(t *testing.T) {
	big := []byte{0, 0, 0, 0, 1, 0, 0, 0} // 1<<32
	var v int
	err := Int().Decode(big, &v)
	var s struct{ I int }
	serr := MustStruct[struct{ I int }]().Decode(big, &s)
	if strconv.IntSize == 64 {
		if err != nil || int64(v) != 1<<32 || serr != nil || int64(s.I) != 1<<32 {
			t.Errorf("64-bit: %v %v %v %v", v, err, s.I, serr)
		}
		return
	}
	if !errors.Is(err, ErrMalformed) || !errors.Is(serr, ErrMalformed) {
		t.Errorf("32-bit: err = %v, %v; want ErrMalformed", err, serr)
	}
}

func decodeWith[T any]() func([]byte) error {
	c := MustStruct[T]()
	return func(b []byte) error {
		var v T
		return c.Decode(b, &v)
	}
}

func TestStructUnsupported(t *testing.T) {
	type Click struct {
		User string
		Meta map[string]string
	}
	type Deep struct {
		A    int
		Subs []struct {
			Ok bool
			Fn [2]func()
		}
	}
	type WithPtr struct{ P *int }
	type WithIface struct{ X any }
	type WithChan struct{ C chan int }
	type WithComplex struct{ C complex128 }
	const fix = "; implement encoding.BinaryAppender/BinaryUnmarshaler or a custom Codec"
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"map", errOf(Struct[Click]), "codec.Struct[codec.Click]: field Meta (map[string]string): unsupported kind map" + fix},
		{"nested path", errOf(Struct[Deep]), "codec.Struct[codec.Deep]: field Subs[].Fn[] (func()): unsupported kind func" + fix},
		{"pointer", errOf(Struct[WithPtr]), "codec.Struct[codec.WithPtr]: field P (*int): unsupported kind ptr; use the pointed-to type int instead" + fix},
		{"interface", errOf(Struct[WithIface]), "codec.Struct[codec.WithIface]: field X (interface {}): unsupported kind interface" + fix},
		{"chan", errOf(Struct[WithChan]), "codec.Struct[codec.WithChan]: field C (chan int): unsupported kind chan" + fix},
		{"complex", errOf(Struct[WithComplex]), "codec.Struct[codec.WithComplex]: field C (complex128): unsupported kind complex128" + fix},
		{"not a struct", errOf(Struct[int64]), "codec.Struct[int64]: int64 is not a struct (kind int64); use codec.For[int64]() or a built-in codec: codec: unsupported type"},
		{"For of a pointer", errOf(For[*Click]), "codec.For[*codec.Click]: unsupported kind ptr; use the pointed-to type codec.Click instead" + fix},
		{"For of a struct", errOf(For[Click]), "codec.For[codec.Click]: field Meta (map[string]string): unsupported kind map" + fix},
		{"For of a slice of maps", errOf(For[[]map[int]int]), "codec.For[[]map[int]int]: field [] (map[int]int): unsupported kind map" + fix},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, ErrUnsupported) {
				t.Errorf("err = %v, want ErrUnsupported", tt.err)
			}
			if tt.err == nil || tt.err.Error() != tt.want {
				t.Errorf("message\n%q\nwant\n%q", tt.err, tt.want)
			}
		})
	}
}

func errOf[T any](f func() (Codec[T], error)) error {
	c, err := f()
	if err == nil || c != nil {
		return errors.New("constructor returned a codec and no error")
	}
	return err
}

func TestMustStructPanics(t *testing.T) {
	defer func() {
		err, _ := recover().(error)
		if !errors.Is(err, ErrUnsupported) {
			t.Errorf("recovered %v, want an ErrUnsupported error", err)
		}
	}()
	MustStruct[struct{ M map[int]int }]()
}

func TestStructEmpty(t *testing.T) {
	c := MustStruct[struct{}]()
	if b := checkCodec(t, c, struct{}{}); len(b) != 0 {
		t.Errorf("encoding % x, want none", b)
	}
	// Slices of zero-size elements carry only their count.
	type zs struct{ Z []struct{} }
	checkCodec(t, MustStruct[zs](), zs{Z: make([]struct{}, 5)})
}

func TestStructDecodeDoesNotAlias(t *testing.T) {
	type v struct {
		S string
		B []byte
		N []int64
		L []string
	}
	c := MustStruct[v]()
	src, _ := c.Append(nil, v{S: "abc", B: []byte("def"), N: []int64{1, 2}, L: []string{"g"}})
	var got v
	if err := c.Decode(src, &got); err != nil {
		t.Fatal(err)
	}
	old := got
	for i := range src {
		src[i] = 0xee // the network buffer is recycled
	}
	want := v{S: "abc", B: []byte("def"), N: []int64{1, 2}, L: []string{"g"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded value changed with src: %+v", got)
	}
	src2, _ := c.Append(nil, v{B: []byte("xyz"), N: []int64{3, 4}, L: []string{"h"}})
	if err := c.Decode(src2, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(old, want) {
		t.Errorf("decoding again changed a previously decoded value: %+v", old)
	}
}

func TestFor(t *testing.T) {
	type name string
	type raw []byte
	tests := []struct {
		name      string
		codecType string // the dynamic type For returns
		check     func(t *testing.T)
	}{
		{"int64", "codec.int64Codec", func(t *testing.T) { checkCodec(t, mustFor[int64](t), 5) }},
		{"int32", "codec.int32Codec", func(t *testing.T) { checkCodec(t, mustFor[int32](t), 5) }},
		{"int", "codec.intCodec", func(t *testing.T) { checkCodec(t, mustFor[int](t), 5) }},
		{"uint64", "codec.uint64Codec", func(t *testing.T) { checkCodec(t, mustFor[uint64](t), 5) }},
		{"uint32", "codec.uint32Codec", func(t *testing.T) { checkCodec(t, mustFor[uint32](t), 5) }},
		{"float64", "codec.float64Codec", func(t *testing.T) { checkCodec(t, mustFor[float64](t), 5) }},
		{"float32", "codec.float32Codec", func(t *testing.T) { checkCodec(t, mustFor[float32](t), 5) }},
		{"bool", "codec.boolCodec", func(t *testing.T) { checkCodec(t, mustFor[bool](t), true) }},
		{"string", "codec.stringCodec", func(t *testing.T) { checkCodec(t, mustFor[string](t), "s") }},
		{"bytes", "codec.bytesCodec", func(t *testing.T) { checkCodec(t, mustFor[[]byte](t), []byte("b")) }},
		{"time", "codec.binaryIfaceCodec[time.Time]", func(t *testing.T) {
			checkRoundTrip(t, mustFor[time.Time](t), time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC))
		}},
		{"struct", "*codec.planCodec[codec.record]", func(t *testing.T) { checkRoundTrip(t, mustFor[record](t), sampleRecord()) }},
		{"named int64 encodes like int64", "*codec.planCodec[codec.userID]", func(t *testing.T) {
			sameEncoding(t, mustFor[userID](t), Int64(), -3)
		}},
		{"named string encodes like string", "*codec.planCodec[codec.name]", func(t *testing.T) {
			sameEncoding(t, mustFor[name](t), String(), "abc")
		}},
		{"named bytes encode like bytes", "*codec.planCodec[codec.raw]", func(t *testing.T) {
			sameEncoding(t, mustFor[raw](t), Bytes(), []byte{1, 2})
		}},
		{"uint16", "*codec.planCodec[uint16]", func(t *testing.T) { checkCodec(t, mustFor[uint16](t), 0xbeef) }},
		{"int8", "*codec.planCodec[int8]", func(t *testing.T) { checkCodec(t, mustFor[int8](t), -8) }},
		{"array", "*codec.planCodec[[4]float32]", func(t *testing.T) { checkCodec(t, mustFor[[4]float32](t), [4]float32{1, 2, 3, 4}) }},
		{"slice of int64", "*codec.planCodec[[]int64]", func(t *testing.T) { checkCodec(t, mustFor[[]int64](t), []int64{1, -1}) }},
		{"slice of strings", "*codec.planCodec[[]string]", func(t *testing.T) { checkCodec(t, mustFor[[]string](t), []string{"a", "", "b"}) }},
		{"tuple", "*codec.planCodec[codec.Tuple2[string,int64]]", func(t *testing.T) {
			checkCodec(t, mustFor[Tuple2[string, int64]](t), Tuple2[string, int64]{"k", 1})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.check(t)
		})
	}
	// The dynamic types, checked apart so that a failure names the case.
	types := map[string]any{
		"int64": mustFor[int64](t), "time": mustFor[time.Time](t), "struct": mustFor[record](t),
		"named int64 encodes like int64": mustFor[userID](t), "named string encodes like string": mustFor[name](t),
		"named bytes encode like bytes": mustFor[raw](t), "slice of int64": mustFor[[]int64](t),
	}
	for _, tt := range tests {
		if c, ok := types[tt.name]; ok {
			got, _, _ := strings.Cut(reflect.TypeOf(c).String(), "[")
			if want, _, _ := strings.Cut(tt.codecType, "["); got != want {
				t.Errorf("For for %s returned a %s, want %s", tt.name, got, tt.codecType)
			}
		}
	}
}

func mustFor[T any](t *testing.T) Codec[T] {
	t.Helper()
	c, err := For[T]()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sameEncoding checks that c encodes v as ref encodes the same value of the underlying type.
func sameEncoding[T, U any](t *testing.T, c Codec[T], ref Codec[U], v U) {
	t.Helper()
	tv := reflect.ValueOf(v).Convert(reflect.TypeFor[T]()).Interface().(T)
	a := checkCodec(t, c, tv)
	b, _ := ref.Append(nil, v)
	if hex.EncodeToString(a) != hex.EncodeToString(b) {
		t.Errorf("encoding % x, want % x as from %T", a, b, ref)
	}
}

// TestDecodedStringsOwnTheirBytes: the strings of a record that Decode copies once (see sharesStrings) are
// not the network buffer's bytes: reusing the buffer leaves them as they were.
func TestDecodedStringsOwnTheirBytes(t *testing.T) {
	c := MustStruct[mixed]()
	want := mixed{ID: 7, Name: "name", Score: 1.5, Tags: []string{"", "tag", "longer tag"}, URL: "https://example.com/x"}
	src, err := c.Append(nil, want)
	if err != nil {
		t.Fatal(err)
	}
	var got mixed
	if err := c.Decode(src, &got); err != nil {
		t.Fatal(err)
	}
	for i := range src {
		src[i] = 'X'
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after the buffer was reused: got %+v, want %+v", got, want)
	}
}
