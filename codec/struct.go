package codec

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unsafe"
)

// Struct returns a codec for the struct type T that walks T's fields once, here, with reflection and
// encodes each record by unsafe pointer arithmetic over a precomputed plan: no reflection per record.
// Exported and unexported fields are encoded alike, in declaration order (see the package doc for the
// encoding). Supported field types: bool, every int and uint size, float32, float64, string, []byte,
// structs and arrays of supported types, slices of supported types, and any type whose pointer
// implements both encoding.BinaryAppender and encoding.BinaryUnmarshaler (time.Time, netip.Addr, ...).
// Maps, pointers, interfaces, channels, funcs and complex numbers are not: the error, which wraps
// ErrUnsupported, names the field path, its type and what to do.
//
// A struct of only fixed-size numeric fields encodes with a handful of memory copies and allocates
// nothing; decoding a string field allocates the string, decoding a slice allocates its elements. The
// strings of a record that can hold two or more and no byte slices or BinaryAppender fields share one
// allocation instead: a copy of the record from its first string on, so a string kept alone keeps at most
// that much of its record alive.
// Encoding a record whose fields (outside slices) include a BinaryAppender type allocates a copy of
// the record, because the record is then handed to user methods through an interface.
func Struct[T any]() (Codec[T], error) {
	t := reflect.TypeFor[T]()
	name := "codec.Struct[" + t.String() + "]"
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%s: %s is not a struct (kind %s); use codec.For[%s]() or a built-in codec: %w",
			name, t, t.Kind(), t, ErrUnsupported)
	}
	return newPlanCodec[T](name, littleEndian)
}

// MustStruct is like Struct but panics if T is not supported. It is meant for package-level variables
// and examples, where T is fixed at compile time.
func MustStruct[T any]() Codec[T] {
	c, err := Struct[T]()
	if err != nil {
		panic(err)
	}
	return c
}

// littleEndian reports whether the host stores numbers little-endian, as the encoding does; only then
// may runs of numeric fields be copied as raw memory.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// opKind says how one op of a plan moves its field between memory and the encoding.
type opKind uint8

const (
	opFix8         opKind = iota // 1 byte: int8, uint8
	opFix16                      // 2 bytes, little-endian
	opFix32                      // 4 bytes: int32, uint32, float32
	opFix64                      // 8 bytes: int64, uint64, float64, and int, uint on 64-bit hosts
	opRun                        // n bytes of adjacent numeric fields copied as memory (little-endian hosts)
	opBool                       // 1 byte, 0 or 1
	opInt32As64                  // int on 32-bit hosts: 8 bytes on the wire
	opUint32As64                 // uint, uintptr on 32-bit hosts: 8 bytes on the wire
	opString                     // uvarint byte length, bytes
	opStringRest                 // bytes to the end of the record (last op of a top-level plan only)
	opRawSlice                   // uvarint count, count elements of n bytes each copied as memory
	opRawSliceRest               // elements of n bytes to the end of the record (last op of a top-level plan only)
	opSlice                      // uvarint count, count encodings of elem
	opSliceRest                  // encodings of fixed-size elem to the end of the record (last op of a top-level plan only)
	opArray                      // n encodings of elem, stride bytes apart in memory
	opBinary                     // uvarint byte length, AppendBinary's bytes
)

// op encodes or decodes one field (or, for opRun, several adjacent ones) at offset off of the value.
type op struct {
	kind    opKind
	off     uintptr        // offset of the field in the value
	n       uintptr        // opRun: bytes; opRawSlice*: element size; opArray: element count
	stride  uintptr        // opSlice, opArray: element size in memory
	elem    *plan          // opSlice, opArray: the element type's plan
	typ     reflect.Type   // opSlice: the slice type, to allocate decoded slices
	ptrType unsafe.Pointer // opBinary: type word of *F for the field type F, see ptrIface
	path    string         // field path for error messages, relative to the plan's type
}

// plan is the list of ops that encodes a value of one type, in encoding order.
type plan struct {
	ops     []op
	size    int // encoded size when it is always the same, else -1
	minSize int // smallest possible encoded size
	// inlineBinary is set when an opBinary is reached without passing through a slice, so encoding
	// hands a pointer into the value itself to user code (see planCodec.Append).
	inlineBinary bool
}

// flattenMax bounds the number of ops that flattening one array into its parent's plan may create;
// larger arrays become a single opArray.
const flattenMax = 64

// builder turns a type into a plan; it runs once per codec construction.
type builder struct {
	raw   bool                   // runs of numeric fields may be copied as memory (host is little-endian)
	plans map[reflect.Type]*plan // element plans by type; an entry exists while being built, for recursive types
}

// newPlanCodec builds the codec for T. The top level of T is never treated as a Binary type: Struct
// walks its fields on request, and For checks for Binary before coming here.
func newPlanCodec[T any](name string, raw bool) (Codec[T], error) {
	t := reflect.TypeFor[T]()
	b := builder{raw: raw, plans: map[reflect.Type]*plan{}}
	ops, err := b.addKind(nil, t, 0, "")
	if err != nil {
		if te, ok := err.(*typeError); ok {
			te.codec = name
		}
		return nil, err
	}
	c := &planCodec[T]{name: name}
	b.finish(&c.plan, ops, true)
	c.flat = raw && c.plan.isFlat(t.Size())
	c.shared = sharesStrings(&c.plan)
	c.lead = leadBytes(&c.plan)
	return c, nil // never a typed nil: the error path above returns a nil interface
}

// add appends the ops for a value of type t at offset off; path names it in errors.
func (b *builder) add(ops []op, t reflect.Type, off uintptr, path string) ([]op, error) {
	if isBinary(t) {
		ptrType := typeWord(reflect.New(t).Interface())
		return append(ops, op{kind: opBinary, off: off, ptrType: ptrType, path: path}), nil
	}
	return b.addKind(ops, t, off, path)
}

// addKind is add without the check for Binary types.
func (b *builder) addKind(ops []op, t reflect.Type, off uintptr, path string) ([]op, error) {
	fixed := func(kind opKind) ([]op, error) {
		return append(ops, op{kind: kind, off: off, path: path}), nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return fixed(opBool)
	case reflect.Int8, reflect.Uint8:
		return fixed(opFix8)
	case reflect.Int16, reflect.Uint16:
		return fixed(opFix16)
	case reflect.Int32, reflect.Uint32, reflect.Float32:
		return fixed(opFix32)
	case reflect.Int64, reflect.Uint64, reflect.Float64:
		return fixed(opFix64)
	case reflect.Int:
		if t.Size() == 8 {
			return fixed(opFix64)
		}
		return fixed(opInt32As64)
	case reflect.Uint, reflect.Uintptr:
		if t.Size() == 8 {
			return fixed(opFix64)
		}
		return fixed(opUint32As64)
	case reflect.String:
		return fixed(opString)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			var err error
			if ops, err = b.add(ops, f.Type, off+f.Offset, joinPath(path, f.Name)); err != nil {
				return nil, err
			}
		}
		return ops, nil
	case reflect.Array:
		return b.addArray(ops, t, off, path)
	case reflect.Slice:
		et := t.Elem()
		if b.isRaw(et) {
			return append(ops, op{kind: opRawSlice, off: off, n: et.Size(), path: path}), nil
		}
		elem, err := b.elemPlan(et)
		if err != nil {
			return nil, prefixTypeError(err, path+"[]")
		}
		return append(ops, op{kind: opSlice, off: off, stride: et.Size(), elem: elem, typ: t, path: path}), nil
	}
	return nil, &typeError{path: path, typ: t}
}

// addArray appends the ops for an array: one run if its elements are raw numbers, the elements' ops
// repeated if that makes few ops, else one opArray.
func (b *builder) addArray(ops []op, t reflect.Type, off uintptr, path string) ([]op, error) {
	n, et := uintptr(t.Len()), t.Elem()
	switch {
	case n == 0: // encodes nothing, whatever the element type (e.g. `_ [0]func()`)
		return ops, nil
	case b.isRaw(et):
		return append(ops, op{kind: opRun, off: off, n: t.Size(), path: path}), nil
	}
	elemOps, err := b.add(nil, et, 0, "")
	if err != nil {
		return nil, prefixTypeError(err, path+"[]")
	}
	if n*uintptr(len(elemOps)) <= flattenMax {
		for i := range n {
			prefix := path + "[" + strconv.Itoa(int(i)) + "]"
			for _, o := range elemOps {
				o.off += off + i*et.Size()
				o.path = joinPath(prefix, o.path)
				ops = append(ops, o)
			}
		}
		return ops, nil
	}
	elem, err := b.elemPlan(et)
	if err != nil {
		return nil, prefixTypeError(err, path+"[]")
	}
	return append(ops, op{kind: opArray, off: off, n: n, stride: et.Size(), elem: elem, path: path}), nil
}

// elemPlan returns the plan for elements of type t, building it once per type. A recursive type
// (type Node struct{ Kids []Node }) gets the plan that is still being built, complete by the time it runs.
func (b *builder) elemPlan(t reflect.Type) (*plan, error) {
	if p, ok := b.plans[t]; ok {
		return p, nil
	}
	p := new(plan)
	b.plans[t] = p
	ops, err := b.add(nil, t, 0, "")
	if err != nil {
		return nil, err
	}
	b.finish(p, ops, false)
	return p, nil
}

// isRaw reports whether a value of t is encoded exactly as it lies in memory: numbers (of the same
// size in memory and on the wire), and arrays and padding-free structs of them, on a little-endian host.
func (b *builder) isRaw(t reflect.Type) bool {
	if !b.raw || t.Size() == 0 || isBinary(t) {
		return false
	}
	switch t.Kind() {
	case reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	case reflect.Int, reflect.Uint, reflect.Uintptr:
		return t.Size() == 8
	case reflect.Array:
		return b.isRaw(t.Elem())
	case reflect.Struct:
		var sum uintptr
		for i := range t.NumField() {
			f := t.Field(i)
			if !b.isRaw(f.Type) {
				return false
			}
			sum += f.Type.Size()
		}
		return sum == t.Size()
	}
	return false
}

// finish completes p from its ops: it merges adjacent numeric fields into runs, lets the last op of a
// top-level plan run to the end of the record, and computes the sizes.
func (b *builder) finish(p *plan, ops []op, top bool) {
	if b.raw {
		ops = coalesce(ops)
	}
	if top && len(ops) > 0 {
		switch last := &ops[len(ops)-1]; last.kind {
		case opString:
			last.kind = opStringRest
		case opRawSlice:
			last.kind = opRawSliceRest
		case opSlice:
			// The same rule as for opRawSlice, which is only used on little-endian hosts, so that
			// the encoding does not depend on the host.
			if last.elem.size > 0 {
				last.kind = opSliceRest
			}
		}
	}
	p.ops = ops
	size, fixed := 0, true
	for i := range ops {
		o := &ops[i]
		if n, ok := encodedFixed(o); ok {
			size += n
			continue
		}
		switch o.kind {
		case opString, opRawSlice, opSlice, opBinary:
			size++ // at least a one-byte uvarint
			fixed = false
		case opStringRest, opRawSliceRest, opSliceRest:
			fixed = false
		case opArray:
			if o.elem.size < 0 {
				fixed = false
			}
			size += int(o.n) * o.elem.minSize
			p.inlineBinary = p.inlineBinary || o.elem.inlineBinary
		}
		p.inlineBinary = p.inlineBinary || o.kind == opBinary
	}
	p.minSize, p.size = size, size
	if !fixed {
		p.size = -1
	}
}

// encodedFixed returns the encoded size of an op of a fixed-size numeric field (or run of them), and false
// for any other op.
func encodedFixed(o *op) (int, bool) {
	switch o.kind {
	case opFix8, opBool:
		return 1, true
	case opFix16:
		return 2, true
	case opFix32:
		return 4, true
	case opFix64, opInt32As64, opUint32As64:
		return 8, true
	case opRun:
		return int(o.n), true
	}
	return 0, false
}

// fixedWidth returns the encoded size of an op copied as memory on a little-endian host, else 0.
func fixedWidth(o *op) uintptr {
	switch o.kind {
	case opFix8:
		return 1
	case opFix16:
		return 2
	case opFix32:
		return 4
	case opFix64:
		return 8
	case opRun:
		return o.n
	}
	return 0
}

// coalesce merges ops of numeric fields that are adjacent in memory (no padding between them) into
// one memory copy. Only valid on a little-endian host.
func coalesce(ops []op) []op {
	out := ops[:0]
	for _, o := range ops {
		if w := fixedWidth(&o); w > 0 && len(out) > 0 {
			last := &out[len(out)-1]
			if lw := fixedWidth(last); lw > 0 && last.off+lw == o.off {
				first, _, _ := strings.Cut(last.path, "..")
				*last = op{kind: opRun, off: last.off, n: lw + w, path: first + ".." + o.path}
				continue
			}
		}
		out = append(out, o)
	}
	for i := range out { // a run of one machine word is a single load and store
		if o := &out[i]; o.kind == opRun {
			switch o.n {
			case 1:
				o.kind = opFix8
			case 2:
				o.kind = opFix16
			case 4:
				o.kind = opFix32
			case 8:
				o.kind = opFix64
			}
		}
	}
	return out
}

// joinPath appends the field path p to prefix: "A" + "B" = "A.B", "A" + "[2]" = "A[2]".
func joinPath(prefix, p string) string {
	switch {
	case p == "":
		return prefix
	case prefix == "":
		return p
	case p[0] == '[':
		return prefix + p
	}
	return prefix + "." + p
}

// typeError reports a type that Struct or For cannot encode. It wraps ErrUnsupported.
type typeError struct {
	codec string       // the codec being built, e.g. "codec.Struct[main.Click]"
	path  string       // the field's path, empty for the top-level type
	typ   reflect.Type // the unsupported type
}

func (e *typeError) Error() string {
	fix := "; implement encoding.BinaryAppender/BinaryUnmarshaler or a custom Codec"
	if e.typ.Kind() == reflect.Pointer {
		fix = "; use the pointed-to type " + e.typ.Elem().String() + " instead" + fix
	}
	if e.path == "" {
		return fmt.Sprintf("%s: unsupported kind %s%s", e.codec, e.typ.Kind(), fix)
	}
	return fmt.Sprintf("%s: field %s (%s): unsupported kind %s%s", e.codec, e.path, e.typ, e.typ.Kind(), fix)
}

func (e *typeError) Unwrap() error { return ErrUnsupported }

// prefixTypeError puts prefix in front of the path of err, a typeError from an element type's plan.
func prefixTypeError(err error, prefix string) error {
	if te, ok := err.(*typeError); ok {
		te.path = joinPath(prefix, te.path)
	}
	return err
}
