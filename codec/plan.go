package codec

import (
	"encoding"
	"encoding/binary"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"unsafe"
)

// planCodec is the codec that Struct and For build for a type by walking it once; see Struct.
type planCodec[T any] struct {
	name string
	plan plan
	// flat is set when the encoding of T is its memory, byte for byte (a little-endian host and a struct of
	// numeric fields without padding): Append and Decode are then one copy.
	flat bool
	// shared is set when a record may hold several strings and nothing else that decoding allocates
	// (see sharesStrings): Decode then copies the record once, from the end of its leading fixed-size
	// fields (lead bytes) on, and makes its strings point into that copy.
	shared bool
	lead   int
}

// unalignedOK says the host loads and stores unaligned values cheaply and safely, so a flat value can be
// copied to or from any offset of a buffer as one typed store or load.
const unalignedOK = runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" || runtime.GOARCH == "386"

// isFlat reports whether p encodes a value of size bytes as one copy of its memory.
func (p *plan) isFlat(size uintptr) bool {
	return len(p.ops) == 1 && p.ops[0].kind == opRun && p.ops[0].off == 0 && p.ops[0].n == size && uintptr(p.size) == size
}

func (c *planCodec[T]) fixedSize() int { return c.plan.size }

func (c *planCodec[T]) memoryCopy() bool { return c.flat && unalignedOK }

func (c *planCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	if c.flat {
		n, size := len(dst), int(unsafe.Sizeof(v))
		if unalignedOK && cap(dst)-n >= size {
			// One store of the value's memory, no append bookkeeping: the hot path of numeric records.
			dst = dst[:n+size]
			*(*T)(unsafe.Pointer(&dst[n])) = v
			return dst, nil
		}
		return append(dst, unsafe.Slice((*byte)(unsafe.Pointer(&v)), size)...), nil
	}
	if c.plan.inlineBinary {
		return c.appendEscaping(dst, v)
	}
	// appendOps does not leak p, so v stays on the stack: no allocation.
	dst, err := appendOps(dst, c.plan.ops, unsafe.Pointer(&v), nil, 0)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", c.name, err)
	}
	return dst, nil
}

// appendEscaping is Append for plans that pass pointers into v to user methods (AppendBinary) through
// an interface: the compiler must then assume they escape, so this copy of v lives on the heap.
// Keeping it apart from Append keeps every other plan allocation-free.
func (c *planCodec[T]) appendEscaping(dst []byte, v T) ([]byte, error) {
	p := unsafe.Pointer(&v)
	dst, err := appendOps(dst, c.plan.ops, p, p, 0)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", c.name, err)
	}
	return dst, nil
}

func (c *planCodec[T]) Decode(src []byte, v *T) error {
	if c.plan.size >= 0 && len(src) != c.plan.size {
		return lengthError(c.name, c.plan.size, len(src))
	}
	if c.flat {
		if unalignedOK {
			*v = *(*T)(unsafe.Pointer(&src[0]))
			return nil
		}
		copy(unsafe.Slice((*byte)(unsafe.Pointer(v)), unsafe.Sizeof(*v)), src)
		return nil
	}
	var tail string
	if c.shared && len(src) > c.plan.minSize { // at minSize, every string is empty
		// One allocation for all the record's strings instead of one each: fewer objects for the
		// allocator and for the collector to mark, which matters for records kept in state by the
		// million. The copy is never written, so strings may point into it; a string kept alone keeps
		// at most its record's bytes alive.
		tail = string(src[c.lead:])
	}
	rest, e := decodeOps(src, c.plan.ops, unsafe.Pointer(v), 0, tail)
	if e != nil {
		e.Codec = c.name
		return e
	}
	if len(rest) != 0 {
		return &Error{Codec: c.name, Problem: strconv.Itoa(len(rest)) + " trailing bytes"}
	}
	return nil
}

// decodeString returns the n bytes at the start of src as a string: a copy, or, when tail is the record's
// own copy of its last len(tail) bytes (which src's lie in), a string of tail's bytes.
func decodeString(src []byte, n int, tail string) string {
	switch {
	case tail == "":
		return string(src[:n])
	case n == 0:
		return "" // keeps no record alive
	}
	at := len(tail) - len(src)
	return tail[at : at+n]
}

// sharesStrings reports whether decoding p should copy the record once for its strings: when a record
// may hold two strings or more (a slice of strings counts as many) and decoding allocates nothing else
// that would repeat the bytes the copy holds (raw slices, whose bytes must be mutable, and Binary fields).
func sharesStrings(p *plan) bool {
	strs, ok := countStrings(p, 1, map[*plan]bool{})
	return ok && strs >= 2
}

// leadBytes returns the encoded size of the fixed-size ops at the start of p, which no string follows.
func leadBytes(p *plan) int {
	n := 0
	for i := range p.ops {
		w, ok := encodedFixed(&p.ops[i])
		if !ok {
			break
		}
		n += w
	}
	return n
}

// countStrings adds up the string ops of p, each counted times times, and reports false if p decodes
// anything that allocates other than strings and slices of them.
func countStrings(p *plan, times int, seen map[*plan]bool) (int, bool) {
	if seen[p] {
		return 2, true // a recursive type: as many strings as there are levels
	}
	seen[p] = true
	defer delete(seen, p)
	n := 0
	for i := range p.ops {
		o := &p.ops[i]
		switch o.kind {
		case opString, opStringRest:
			n += times
		case opRawSlice, opRawSliceRest, opBinary:
			return 0, false
		case opSlice, opSliceRest, opArray:
			if o.elem == nil {
				continue
			}
			k := 2 // a slice may hold any number of elements
			if o.kind == opArray {
				k = int(min(o.n, 2))
			}
			m, ok := countStrings(o.elem, times*k, seen)
			if !ok {
				return 0, false
			}
			n += m
		}
	}
	return n, true
}

// maxDepth bounds the nesting of slices and arrays in one record, so that a recursive type
// (type Node struct{ Kids []Node }) cannot exhaust the stack on hostile input.
const maxDepth = 1000

// maxSliceMemory bounds the memory that decoding one slice may allocate when rest bytes of input
// remain, so that a short hostile record cannot make Decode allocate gigabytes. Types built only from
// the supported kinds never get near it (a string or slice header takes 16 or 24 bytes of memory per
// byte of input at most); only Binary element types whose values are large in memory and small
// on the wire can.
func maxSliceMemory(rest int) uintptr {
	const memPerInputByte, slack = 64, 1 << 20
	if uintptr(rest) > (^uintptr(0)-slack)/memPerInputByte {
		return ^uintptr(0)
	}
	return uintptr(rest)*memPerInputByte + slack
}

// sliceHeader is the memory layout of a slice.
type sliceHeader struct {
	data unsafe.Pointer
	len  int
	cap  int
}

// eface is the memory layout of an interface value of type any.
type eface struct {
	typ, data unsafe.Pointer
}

// typeWord returns the type word of x.
func typeWord(x any) unsafe.Pointer { return (*eface)(unsafe.Pointer(&x)).typ }

// ptrIface returns an interface value holding a pointer p of the pointer type whose type word is typ
// (obtained from typeWord at construction). An interface stores a pointer directly in its data word,
// so this is exactly what converting the typed pointer to any produces, without reflection per record.
func ptrIface(typ, p unsafe.Pointer) any {
	var x any
	*(*eface)(unsafe.Pointer(&x)) = eface{typ: typ, data: p}
	return x
}

// appendOps appends the encoding of the value at p. hp is nil, or p itself for values that may be
// passed to user methods: only hp, never p, flows into an interface, so the compiler can keep the
// value behind p on the stack when the plan has no inline opBinary. Slice elements live on the heap
// already and are passed as both.
func appendOps(dst []byte, ops []op, p, hp unsafe.Pointer, depth int) ([]byte, error) {
	for i := range ops {
		o := &ops[i]
		q := unsafe.Add(p, o.off)
		switch o.kind {
		case opFix8, opBool:
			dst = append(dst, *(*uint8)(q))
		case opFix16:
			dst = binary.LittleEndian.AppendUint16(dst, *(*uint16)(q))
		case opFix32:
			dst = binary.LittleEndian.AppendUint32(dst, *(*uint32)(q))
		case opFix64:
			dst = binary.LittleEndian.AppendUint64(dst, *(*uint64)(q))
		case opRun:
			dst = append(dst, unsafe.Slice((*byte)(q), o.n)...)
		case opInt32As64:
			dst = binary.LittleEndian.AppendUint64(dst, uint64(int64(*(*int32)(q))))
		case opUint32As64:
			dst = binary.LittleEndian.AppendUint64(dst, uint64(*(*uint32)(q)))
		case opString:
			s := *(*string)(q)
			dst = binary.AppendUvarint(dst, uint64(len(s)))
			dst = append(dst, s...)
		case opStringRest:
			dst = append(dst, *(*string)(q)...)
		case opRawSlice, opRawSliceRest:
			h := (*sliceHeader)(q)
			if o.kind == opRawSlice {
				dst = binary.AppendUvarint(dst, uint64(h.len))
			}
			if h.len > 0 {
				dst = append(dst, unsafe.Slice((*byte)(h.data), uintptr(h.len)*o.n)...)
			}
		case opSlice, opSliceRest:
			h := (*sliceHeader)(q)
			if o.kind == opSlice {
				dst = binary.AppendUvarint(dst, uint64(h.len))
			}
			if len(o.elem.ops) == 0 || h.len == 0 {
				break
			}
			if depth >= maxDepth {
				return dst, fmt.Errorf("field %s: nested deeper than %d slices and arrays", o.path, maxDepth)
			}
			for j := range h.len {
				e := unsafe.Add(h.data, uintptr(j)*o.stride)
				var err error
				if dst, err = appendOps(dst, o.elem.ops, e, e, depth+1); err != nil {
					return dst, err
				}
			}
		case opArray:
			if depth >= maxDepth {
				return dst, fmt.Errorf("field %s: nested deeper than %d slices and arrays", o.path, maxDepth)
			}
			for j := range o.n {
				var eh unsafe.Pointer
				if hp != nil {
					eh = unsafe.Add(hp, o.off+j*o.stride)
				}
				var err error
				if dst, err = appendOps(dst, o.elem.ops, unsafe.Add(q, j*o.stride), eh, depth+1); err != nil {
					return dst, err
				}
			}
		case opBinary:
			if hp == nil {
				return dst, fmt.Errorf("field %s: internal error: binary field without a heap pointer", o.path)
			}
			ba := ptrIface(o.ptrType, unsafe.Add(hp, o.off)).(encoding.BinaryAppender)
			start := len(dst)
			out, err := ba.AppendBinary(append(dst, 0))
			if err != nil {
				return dst, fmt.Errorf("field %s: AppendBinary: %w", o.path, err)
			}
			dst = finishPrefix(out, start)
		}
	}
	return dst, nil
}

// decodeOps decodes the front of src into the value at p and returns the rest of src.
// Errors carry the field path relative to ops; the caller fills in the codec.
func decodeOps(src []byte, ops []op, p unsafe.Pointer, depth int, tail string) ([]byte, *Error) {
	for i := range ops {
		o := &ops[i]
		q := unsafe.Add(p, o.off)
		switch o.kind {
		case opFix8:
			if len(src) < 1 {
				return nil, truncated(o, 1, src)
			}
			*(*uint8)(q) = src[0]
			src = src[1:]
		case opBool:
			if len(src) < 1 {
				return nil, truncated(o, 1, src)
			}
			if src[0] > 1 {
				return nil, &Error{Field: o.path, Problem: "bool byte " + strconv.Itoa(int(src[0])) + " is neither 0 nor 1"}
			}
			*(*uint8)(q) = src[0]
			src = src[1:]
		case opFix16:
			if len(src) < 2 {
				return nil, truncated(o, 2, src)
			}
			*(*uint16)(q) = binary.LittleEndian.Uint16(src)
			src = src[2:]
		case opFix32:
			if len(src) < 4 {
				return nil, truncated(o, 4, src)
			}
			*(*uint32)(q) = binary.LittleEndian.Uint32(src)
			src = src[4:]
		case opFix64:
			if len(src) < 8 {
				return nil, truncated(o, 8, src)
			}
			*(*uint64)(q) = binary.LittleEndian.Uint64(src)
			src = src[8:]
		case opRun:
			if uintptr(len(src)) < o.n {
				return nil, truncated(o, int(o.n), src)
			}
			copy(unsafe.Slice((*byte)(q), o.n), src)
			src = src[o.n:]
		case opInt32As64:
			if len(src) < 8 {
				return nil, truncated(o, 8, src)
			}
			x := int64(binary.LittleEndian.Uint64(src))
			if x != int64(int32(x)) {
				return nil, &Error{Field: o.path, Problem: strconv.FormatInt(x, 10) + " overflows int"}
			}
			*(*int32)(q) = int32(x)
			src = src[8:]
		case opUint32As64:
			if len(src) < 8 {
				return nil, truncated(o, 8, src)
			}
			x := binary.LittleEndian.Uint64(src)
			if x != uint64(uint32(x)) {
				return nil, &Error{Field: o.path, Problem: strconv.FormatUint(x, 10) + " overflows uint"}
			}
			*(*uint32)(q) = uint32(x)
			src = src[8:]
		case opString:
			n, k := readLen(src)
			if k <= 0 {
				return nil, &Error{Field: o.path, Problem: lenProblem(k)}
			}
			if src = src[k:]; n > len(src) {
				return nil, truncated(o, n, src)
			}
			*(*string)(q) = decodeString(src, n, tail)
			src = src[n:]
		case opStringRest:
			*(*string)(q) = decodeString(src, len(src), tail)
			src = src[len(src):]
		case opRawSlice:
			n, k := readLen(src)
			if k <= 0 {
				return nil, &Error{Field: o.path, Problem: lenProblem(k)}
			}
			if src = src[k:]; n > len(src)/int(o.n) {
				return nil, tooManyElements(o, n, int(o.n), src)
			}
			setRawSlice(q, src[:n*int(o.n)], n)
			src = src[n*int(o.n):]
		case opRawSliceRest:
			if len(src)%int(o.n) != 0 {
				return nil, &Error{Field: o.path, Problem: strconv.Itoa(len(src)) + " bytes is not a whole number of " +
					strconv.Itoa(int(o.n)) + "-byte elements"}
			}
			setRawSlice(q, src, len(src)/int(o.n))
			src = src[len(src):]
		case opSlice, opSliceRest:
			var n int
			if o.kind == opSliceRest {
				if len(src)%o.elem.size != 0 {
					return nil, &Error{Field: o.path, Problem: strconv.Itoa(len(src)) + " bytes is not a whole number of " +
						strconv.Itoa(o.elem.size) + "-byte elements"}
				}
				n = len(src) / o.elem.size
			} else {
				var k int
				if n, k = readLen(src); k <= 0 {
					return nil, &Error{Field: o.path, Problem: lenProblem(k)}
				}
				src = src[k:]
			}
			// Bound the allocation by the input: each element takes at least minSize bytes, and the
			// elements' memory may be at most memPerInputByte times the input (see maxSliceMemory).
			if m := o.elem.minSize; (m > 0 && n > len(src)/m) || (m == 0 && o.stride > 0 && n > len(src)) {
				return nil, tooManyElements(o, n, max(m, 1), src)
			}
			if o.stride > 0 && uintptr(n) > maxSliceMemory(len(src))/o.stride {
				return nil, &Error{Field: o.path, Problem: strconv.Itoa(n) + " elements of " + strconv.Itoa(int(o.stride)) +
					" bytes in memory from " + strconv.Itoa(len(src)) + " input bytes exceed the decoding memory bound"}
			}
			data := makeSlice(q, o.typ, n)
			if len(o.elem.ops) == 0 || n == 0 {
				break
			}
			if depth >= maxDepth {
				return nil, &Error{Field: o.path, Problem: "nested deeper than " + strconv.Itoa(maxDepth) + " slices and arrays"}
			}
			for j := range n {
				var e *Error
				if src, e = decodeOps(src, o.elem.ops, unsafe.Add(data, uintptr(j)*o.stride), depth+1, tail); e != nil {
					e.Field = joinPath(o.path+"["+strconv.Itoa(j)+"]", e.Field)
					return nil, e
				}
			}
		case opArray:
			if depth >= maxDepth {
				return nil, &Error{Field: o.path, Problem: "nested deeper than " + strconv.Itoa(maxDepth) + " slices and arrays"}
			}
			for j := range o.n {
				var e *Error
				if src, e = decodeOps(src, o.elem.ops, unsafe.Add(q, j*o.stride), depth+1, tail); e != nil {
					e.Field = joinPath(o.path+"["+strconv.Itoa(int(j))+"]", e.Field)
					return nil, e
				}
			}
		case opBinary:
			n, k := readLen(src)
			if k <= 0 {
				return nil, &Error{Field: o.path, Problem: lenProblem(k)}
			}
			if src = src[k:]; n > len(src) {
				return nil, truncated(o, n, src)
			}
			u := ptrIface(o.ptrType, q).(encoding.BinaryUnmarshaler)
			if err := u.UnmarshalBinary(src[:n]); err != nil {
				return nil, &Error{Field: o.path, Problem: "UnmarshalBinary failed", Err: err}
			}
			src = src[n:]
		}
	}
	return src, nil
}

// truncated reports that o needs want more bytes than src has.
func truncated(o *op, want int, src []byte) *Error {
	return &Error{Field: o.path, Problem: "truncated: want " + strconv.Itoa(want) + " bytes, have " + strconv.Itoa(len(src))}
}

// tooManyElements reports a slice count that src cannot hold.
func tooManyElements(o *op, n, elemMin int, src []byte) *Error {
	return &Error{Field: o.path, Problem: "truncated: " + strconv.Itoa(n) + " elements of " + strconv.Itoa(elemMin) +
		" bytes or more, have " + strconv.Itoa(len(src)) + " bytes"}
}

// setRawSlice stores in the slice at q a new slice of n elements whose memory is a copy of b.
// The element type has no pointers, so any suitably aligned memory will do: bytes for 1-byte
// elements, else 8-byte words (no element type is aligned more strictly).
func setRawSlice(q unsafe.Pointer, b []byte, n int) {
	h := (*sliceHeader)(q)
	if n == 0 {
		*h = sliceHeader{}
		return
	}
	var data unsafe.Pointer
	if len(b) == n {
		data = unsafe.Pointer(unsafe.SliceData(cloneBytes(b)))
	} else {
		words := make([]uint64, (len(b)+7)/8)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(b)), b)
		data = unsafe.Pointer(unsafe.SliceData(words))
	}
	*h = sliceHeader{data: data, len: n, cap: n}
}

// makeSlice stores in the slice at q, of type typ, a new zeroed slice of n elements and returns its
// data pointer. It never reuses the old backing array, which the caller may still hold.
func makeSlice(q unsafe.Pointer, typ reflect.Type, n int) unsafe.Pointer {
	h := (*sliceHeader)(q)
	*h = sliceHeader{}
	if n == 0 {
		return nil
	}
	s := reflect.NewAt(typ, q).Elem()
	s.Grow(n) // allocates exactly the new backing array, with typ's element type for the GC
	s.SetLen(n)
	return h.data
}
