package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/barrier"
)

func sampleCheckpoint() *CompletedCheckpoint {
	return &CompletedCheckpoint{
		ID:              12,
		TimestampMillis: 1_700_000_000_000,
		CompletedMillis: 1_700_000_000_250,
		Mode:            barrier.AtLeastOnce,
		Vertices: []Vertex{{ID: 0, Name: "Source: gen -> map", Parallelism: 2, Operators: []string{"gen", "map"}},
			{ID: 2, Name: "check", Parallelism: 1, Operators: []string{"checker"}}},
		States: []StateHandle{
			{Attempt: att(0, 0, 0), Inline: []byte{0, 1, 2, 255}, Operators: []string{"gen"}},
			{Attempt: att(0, 1, 3), Finished: true},
			{Attempt: att(2, 0, 1), Blobs: []BlobRef{{Key: "v2-0-a1-state", Size: 120, CRC: 0xdeadbeef}, {Key: "v2-0-a1-keyed", Size: 20, CRC: 1}},
				Operators: []string{"checker"}},
		},
	}
}

func TestMetadataRoundTrip(t *testing.T) {
	cp := sampleCheckpoint()
	obj, err := EncodeMetadata(cp)
	if err != nil {
		t.Fatal(err)
	}
	if string(obj[:4]) != "RNMD" {
		t.Fatalf("magic %q", obj[:4])
	}
	back, err := DecodeMetadata("k", obj)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cp) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", back, cp)
	}
	// The payload is readable JSON for humans with standard tools.
	if !bytes.Contains(obj, []byte(`"name":"Source: gen -> map"`)) {
		t.Fatalf("payload is not the documented JSON: %s", obj[16:len(obj)-4])
	}
}

// Every prefix and every single-bit flip of a valid object is rejected as damage, never accepted and never
// a panic: the checksum and length checks leave no hole.
func TestMetadataDamageIsAlwaysDetected(t *testing.T) {
	obj, err := EncodeMetadata(sampleCheckpoint())
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(obj); n++ {
		_, err := DecodeMetadata("k", obj[:n])
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("prefix of %d bytes: %v", n, err)
		}
		var ce *CorruptError
		if n >= 4 && (!errors.As(err, &ce) || ce.Problem != ProblemTruncated) {
			t.Fatalf("prefix of %d bytes: %v, want truncated", n, err)
		}
	}
	if _, err := DecodeMetadata("k", append(bytes.Clone(obj), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
	for i := range obj {
		for bit := range 8 {
			bad := bytes.Clone(obj)
			bad[i] ^= 1 << bit
			_, err := DecodeMetadata("k", bad)
			if err == nil {
				t.Fatalf("flip of bit %d in byte %d accepted", bit, i)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("flip of bit %d in byte %d: %v", bit, i, err)
			}
		}
	}
}

func TestEnvelopeProblems(t *testing.T) {
	obj, _ := seal(magicState, []byte("payload"))
	cases := []struct {
		name string
		obj  []byte
		want Problem
	}{
		{"empty", nil, ProblemTruncated},
		{"magic prefix", []byte("RN"), ProblemTruncated},
		{"short junk", []byte("x"), ProblemBadMagic},
		{"other magic", append([]byte("RNMD"), obj[4:]...), ProblemBadMagic},
		{"header only", obj[:16], ProblemTruncated},
		{"last byte cut", obj[:len(obj)-1], ProblemTruncated},
		{"extra byte", append(bytes.Clone(obj), 7), ProblemSizeMismatch},
	}
	for _, tc := range cases {
		_, _, err := open("k", magicState, tc.obj)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Problem != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	newer := bytes.Clone(obj)
	newer[4] = byte(formatVersion + 1)
	if _, _, err := open("k", magicState, newer); !errors.Is(err, ErrUnsupportedVersion) || errors.Is(err, ErrCorrupt) {
		t.Errorf("newer version: %v", err)
	}
	payload, _, err := open("k", magicState, obj)
	if err != nil || string(payload) != "payload" {
		t.Fatalf("open(seal(x)) = %q, %v", payload, err)
	}
}

func TestDecodeRejectsInconsistentMetadata(t *testing.T) {
	for name, body := range map[string]string{
		"unknown field":                      `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":0}],"extra":1}`,
		"unknown mode":                       `{"id":1,"mode":"sometimes","vertices":[{"id":0,"name":"a","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":0}]}`,
		"missing subtask":                    `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":2}],"states":[{"vertex":0,"index":0,"attempt":0}]}`,
		"two documents":                      `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":0}]} {}`,
		"blob leaves dir":                    `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":0,"blobs":[{"key":"../x","size":30,"crc32c":1}]}]}`,
		"finished has state":                 `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":0,"finished":true,"inline":"AA=="}]}`,
		"not json":                           `hello`,
		"uid in two vertices":                `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1,"operators":["x"]},{"id":1,"name":"b","parallelism":1,"operators":["x"]}],"states":[{"vertex":0,"index":0,"attempt":0},{"vertex":1,"index":0,"attempt":0}]}`,
		"empty uid":                          `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1,"operators":[""]}],"states":[{"vertex":0,"index":0,"attempt":0}]}`,
		"state of another vertex's operator": `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1,"operators":["x"]}],"states":[{"vertex":0,"index":0,"attempt":0,"operators":["y"]}]}`,
		"operators unsorted":                 `{"id":1,"mode":"exactly-once","vertices":[{"id":0,"name":"a","parallelism":1,"operators":["x","y"]}],"states":[{"vertex":0,"index":0,"attempt":0,"operators":["y","x"]}]}`,
	} {
		obj, _ := seal(magicMetadata, []byte(body))
		_, err := DecodeMetadata("k", obj)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Problem != ProblemBadPayload {
			t.Errorf("%s: %v, want bad payload", name, err)
		}
	}
}

// TestMetadataVersion1Reads: metadata written before operator uids were recorded (format 1, without
// "operators") still decodes, with no operators, which maps its state to vertices as before.
func TestMetadataVersion1Reads(t *testing.T) {
	body := `{"id":3,"timestamp_ms":5,"completed_ms":6,"mode":"exactly_once","vertices":[{"id":0,"name":"gen -> sum","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":2,"blobs":[{"key":"v0-0-a2-state","size":40,"crc32c":7}]}]}`
	obj, _ := seal(magicMetadata, []byte(body))
	binary.LittleEndian.PutUint16(obj[4:], 1)
	binary.LittleEndian.PutUint32(obj[len(obj)-4:], checksum(obj[:len(obj)-4]))
	cp, err := DecodeMetadata("k", obj)
	if err != nil {
		t.Fatal(err)
	}
	if v := cp.Vertices[0]; v.Name != "gen -> sum" || v.Operators != nil || cp.States[0].Operators != nil || len(cp.States[0].Blobs) != 1 {
		t.Fatalf("decoded %+v", cp)
	}
}

// TestMetadataModeSpellings: metadata records the mode as barrier.Mode spells it, and reads the spelling
// with underscores too, which the metadata of earlier versions holds.
func TestMetadataModeSpellings(t *testing.T) {
	for _, tc := range []struct {
		stored string
		want   barrier.Mode
	}{
		{"exactly-once", barrier.ExactlyOnce},
		{"at-least-once", barrier.AtLeastOnce},
		{"exactly_once", barrier.ExactlyOnce},
		{"at_least_once", barrier.AtLeastOnce},
	} {
		t.Run(tc.stored, func(t *testing.T) {
			body := `{"id":3,"mode":"` + tc.stored + `","vertices":[{"id":0,"name":"a","parallelism":1}],"states":[{"vertex":0,"index":0,"attempt":0}]}`
			obj, _ := seal(magicMetadata, []byte(body))
			cp, err := DecodeMetadata("k", obj)
			if err != nil {
				t.Fatal(err)
			}
			if cp.Mode != tc.want {
				t.Fatalf("mode %q decodes as %s, want %s", tc.stored, cp.Mode, tc.want)
			}
			again, err := EncodeMetadata(cp)
			if err != nil {
				t.Fatal(err)
			}
			if want := `"mode":"` + tc.want.String() + `"`; !bytes.Contains(again, []byte(want)) {
				t.Fatalf("re-encoded metadata %q lacks %s", again, want)
			}
		})
	}
}

func FuzzDecodeMetadata(f *testing.F) {
	obj, _ := EncodeMetadata(sampleCheckpoint())
	f.Add(obj)
	f.Add([]byte("RNMD"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cp, err := DecodeMetadata("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("error of no known kind: %v", err)
			}
			return
		}
		again, err := EncodeMetadata(cp)
		if err != nil {
			t.Fatalf("decoded metadata does not encode: %v", err)
		}
		if _, err := DecodeMetadata("again", again); err != nil {
			t.Fatalf("re-encoded metadata does not decode: %v", err)
		}
	})
}

func TestCompatible(t *testing.T) {
	cp := sampleCheckpoint()
	if err := Compatible(cp, []string{"check", "Source: gen -> map"}); err != nil {
		t.Fatalf("same operators: %v", err)
	}
	err := Compatible(cp, []string{"Source: gen -> map", "count", "print"})
	var ie *IncompatibleError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIncompatible) {
		t.Fatalf("different operators: %v", err)
	}
	if !reflect.DeepEqual(ie.Missing, []string{"check"}) || !reflect.DeepEqual(ie.Extra, []string{"count", "print"}) {
		t.Fatalf("missing %v, extra %v", ie.Missing, ie.Extra)
	}
	for _, want := range []string{"checkpoint 12", `"check"`, `"count"`, `"print"`, "missing from the job", "no state for"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	// Names count: one "check" in the checkpoint does not cover two in the job.
	if err := Compatible(cp, []string{"Source: gen -> map", "check", "check"}); !errors.Is(err, ErrIncompatible) {
		t.Fatalf("duplicate operator: %v", err)
	}

	isSource := func(v Vertex) bool { return strings.HasPrefix(v.Name, "Source") }
	if err := CompatibleVertices(cp, []Vertex{{ID: 2, Name: "check", Parallelism: 1}, {ID: 0, Name: "Source: gen -> map", Parallelism: 2}}, isSource); err != nil {
		t.Fatalf("same vertices: %v", err)
	}
	err = CompatibleVertices(cp, []Vertex{{ID: 0, Name: "Source: gen -> map", Parallelism: 4}, {ID: 1, Name: "check", Parallelism: 1}}, isSource)
	if !errors.As(err, &ie) || len(ie.Mismatched) != 2 || !strings.Contains(err.Error(), "parallelism 2 in checkpoint, 4 in job (a source") {
		t.Fatalf("changed shape: %v", err)
	}
	// A vertex that is not a source may change its parallelism: its keyed state is redistributed.
	if err := CompatibleVertices(cp, []Vertex{{ID: 2, Name: "check", Parallelism: 3}, {ID: 0, Name: "Source: gen -> map", Parallelism: 2}}, isSource); err != nil {
		t.Fatalf("rescaled keyed vertex: %v", err)
	}
}

// The package holds its place in the layering of docs/architecture.md: of Runnel's packages it may import
// ident, and barrier for the checkpoint mode, only.
func TestImportsStayInLayer(t *testing.T) {
	const module = "github.com/runnel-dev/runnel"
	allowed := map[string]bool{
		module + "/internal/ident":      true,
		module + "/internal/barrier":    true,
		module + "/internal/checkpoint": true, // from sub-packages and external tests
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if (p == module || strings.HasPrefix(p, module+"/")) && !allowed[p] &&
				!strings.HasPrefix(p, module+"/internal/checkpoint/") {
				t.Errorf("%s imports %s: package checkpoint may only import internal/ident and internal/barrier", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
