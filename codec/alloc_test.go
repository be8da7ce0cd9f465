package codec

import (
	"testing"
	"time"
)

// mixed has strings and a slice next to numbers.
type mixed struct {
	ID    int64
	Name  string
	Score float64
	Tags  []string
	URL   string
}

type threeStrings struct {
	A       int64
	B, C, D string
}

type oneString struct {
	A int64
	S string
}

type stringsAndBytes struct {
	S, T string
	B    []byte
}

// allocs returns the allocations of one Append into a pre-sized buffer and of one Decode, both called
// through the Codec interface as the engine calls them.
func allocs[T any](c Codec[T], v T) (appendAllocs, decodeAllocs float64) {
	buf := make([]byte, 0, 4096)
	src, err := c.Append(nil, v)
	if err != nil {
		panic(err)
	}
	var out T
	appendAllocs = testing.AllocsPerRun(100, func() {
		buf, _ = c.Append(buf[:0], v)
	})
	decodeAllocs = testing.AllocsPerRun(100, func() {
		if err := c.Decode(src, &out); err != nil {
			panic(err)
		}
	})
	return appendAllocs, decodeAllocs
}

func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	type fixedPair = Tuple2[int64, float64]
	tests := []struct {
		name                   string
		run                    func() (float64, float64)
		wantAppend, wantDecode float64
	}{
		{"Int64", func() (float64, float64) { return allocs(Int64(), 1) }, 0, 0},
		{"Int32", func() (float64, float64) { return allocs(Int32(), 1) }, 0, 0},
		{"Int", func() (float64, float64) { return allocs(Int(), 1) }, 0, 0},
		{"Uint64", func() (float64, float64) { return allocs(Uint64(), 1) }, 0, 0},
		{"Uint32", func() (float64, float64) { return allocs(Uint32(), 1) }, 0, 0},
		{"Float64", func() (float64, float64) { return allocs(Float64(), 1) }, 0, 0},
		{"Float32", func() (float64, float64) { return allocs(Float32(), 1) }, 0, 0},
		{"Bool", func() (float64, float64) { return allocs(Bool(), true) }, 0, 0},
		{"String", func() (float64, float64) { return allocs(String(), "hello") }, 0, 1},
		{"Bytes", func() (float64, float64) { return allocs(Bytes(), []byte("hello")) }, 0, 1},
		{"Struct numeric", func() (float64, float64) { return allocs(MustStruct[numeric](), numeric{A: 1, E: 2}) }, 0, 0},
		{"Struct point", func() (float64, float64) { return allocs(MustStruct[point](), point{1, 2}) }, 0, 0},
		{"Struct 2 strings and a 2-string slice", func() (float64, float64) {
			return allocs(MustStruct[mixed](), mixed{ID: 1, Name: "name", Tags: []string{"tag1", "tag2"}, URL: "https://x"})
		}, 0, 2}, // the slice, and one copy of the record for Name, URL and the slice's 2 strings
		{"Struct empty strings", func() (float64, float64) { return allocs(MustStruct[mixed](), mixed{ID: 1}) }, 0, 0},
		{"Struct 3 strings", func() (float64, float64) {
			return allocs(MustStruct[threeStrings](), threeStrings{A: 1, B: "bee", C: "sea", D: "https://x"})
		}, 0, 1}, // one copy of the record
		{"Struct 1 string", func() (float64, float64) { return allocs(MustStruct[oneString](), oneString{A: 1, S: "hello"}) }, 0, 1},
		// Raw bytes must be mutable, so they are copied apart; the strings then are too, not a second time.
		{"Struct 2 strings and bytes", func() (float64, float64) {
			return allocs(MustStruct[stringsAndBytes](), stringsAndBytes{S: "hello", T: "world", B: []byte("raw")})
		}, 0, 3},
		{"Pair fixed", func() (float64, float64) { return allocs(Pair(Int64(), Float64()), fixedPair{1, 2}) }, 0, 0},
		{"Pair string key", func() (float64, float64) {
			return allocs(Pair(String(), Int64()), Tuple2[string, int64]{"key", 2})
		}, 0, 1},
		{"For numeric struct", func() (float64, float64) {
			c, _ := For[numeric]()
			return allocs(c, numeric{})
		}, 0, 0},
		// A Binary field outside slices makes Append copy the record to the heap (see Struct).
		{"Struct with time.Time", func() (float64, float64) {
			return allocs(MustStruct[struct {
				A int64
				T time.Time
			}](), struct {
				A int64
				T time.Time
			}{1, time.Unix(5, 0).UTC()})
		}, 1, 0},
		// Binary fields inside a slice are already on the heap: no copy.
		{"Struct with []time.Time", func() (float64, float64) {
			return allocs(MustStruct[struct{ T []time.Time }](), struct{ T []time.Time }{[]time.Time{time.Unix(5, 0).UTC()}})
		}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, d := tt.run()
			if a != tt.wantAppend || d != tt.wantDecode {
				t.Errorf("allocs per Append %v, per Decode %v; want %v and %v", a, d, tt.wantAppend, tt.wantDecode)
			}
		})
	}
}

// TestAllocsBinary reports, without asserting, what the Binary codecs cost: Append hands a pointer
// to its copy of the value to AppendBinary, which the compiler must assume escapes.
func TestAllocsBinary(t *testing.T) {
	a, d := allocs(Binary[temperature](), temperature{5})
	t.Logf("Binary[temperature]: %v allocs per Append, %v per Decode", a, d)
	a, d = allocs(mustFor[temperature](t), temperature{5})
	t.Logf("For[temperature]: %v allocs per Append, %v per Decode", a, d)
}
