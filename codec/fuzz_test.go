package codec

import (
	"testing"
)

// fuzzRecord covers every op kind except opBinary (whose user code decides what is canonical),
// so the fuzz tests can demand that whatever decodes re-encodes to the same bytes.
type fuzzRecord struct {
	A     int16
	B     bool
	S     string
	Raw   []uint32
	Pts   [2]point
	Nodes []node
	Big   [65]bool // an opArray
	Strs  [2]string
	U     uint
	Mixed []struct {
		F bool
		G int64
	}
	Tail []byte
}

func FuzzStructDecode(f *testing.F) {
	c := MustStruct[fuzzRecord]()
	portable, err := newPlanCodec[fuzzRecord]("portable", false)
	if err != nil {
		f.Fatal(err)
	}
	for _, v := range []fuzzRecord{
		{},
		{A: -1, B: true, S: "s", Raw: []uint32{1, 2}, Nodes: []node{{Val: 1, Kids: []node{{Val: 2}}}}, Strs: [2]string{"x", ""},
			U: 7, Mixed: []struct {
				F bool
				G int64
			}{{true, -1}}, Tail: []byte("tail")},
	} {
		b, err := c.Append(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0x01, 0x80})
	f.Fuzz(func(t *testing.T, src []byte) {
		// Both plans must accept exactly the same encodings; checkDecodeCanonical checks that each
		// re-encodes what it accepts to the same bytes, so they also agree on the values.
		ok := checkDecodeCanonical(t, c, src)
		if ok != checkDecodeCanonical(t, portable, src) {
			t.Fatalf("raw and portable plans disagree on whether % x decodes", src)
		}
	})
}

// FuzzStructDecodeBinary only demands that decoding arbitrary input into a record with Binary fields
// does not panic and fails with ErrMalformed.
func FuzzStructDecodeBinary(f *testing.F) {
	c := MustStruct[withTemps]()
	b, _ := c.Append(nil, withTemps{A: 1, List: []temperature{{1}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, src []byte) {
		var v withTemps
		if err := c.Decode(src, &v); err == nil {
			if _, err := c.Append(nil, v); err != nil {
				t.Fatalf("Append(Decode(% x)): %v", src, err)
			}
		} else if !isMalformed(err) {
			t.Fatalf("Decode(% x) = %v, which does not wrap ErrMalformed", src, err)
		}
	})
}

func FuzzBuiltinDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{1, 2, 3, 4})
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, src []byte) {
		checkDecodeCanonical(t, Int64(), src)
		checkDecodeCanonical(t, Int32(), src)
		checkDecodeCanonical(t, Int(), src)
		checkDecodeCanonical(t, Uint64(), src)
		checkDecodeCanonical(t, Uint32(), src)
		checkDecodeCanonical(t, Float64(), src)
		checkDecodeCanonical(t, Float32(), src)
		checkDecodeCanonical(t, Bool(), src)
		checkDecodeCanonical(t, String(), src)
		checkDecodeCanonical(t, Bytes(), src)
	})
}

func FuzzPairDecode(f *testing.F) {
	c := Pair(Pair(String(), Int32()), Pair(MustStruct[node](), Bytes()))
	b, _ := c.Append(nil, Tuple2[Tuple2[string, int32], Tuple2[node, []byte]]{
		Tuple2[string, int32]{"key", 1}, Tuple2[node, []byte]{node{Val: 2, Kids: []node{{}}}, []byte("v")}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, src []byte) {
		checkDecodeCanonical(t, c, src)
	})
}
