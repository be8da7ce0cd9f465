package nexmark_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/examples/nexmark"
)

func TestAppendString(t *testing.T) {
	for _, tc := range []struct{ in, want, decoded string }{
		{"", `""`, ""},
		{"plain text", `"plain text"`, "plain text"},
		{`q"b\s`, `"q\"b\\s"`, `q"b\s`},
		{"\b\f\n\r\t", `"\b\f\n\r\t"`, "\b\f\n\r\t"},
		{"\x00\x1f\x7f", `"\u0000\u001f` + "\x7f\"", "\x00\x1f\x7f"},
		{"ünï €😀 </>&", `"ünï €😀 </>&"`, "ünï €😀 </>&"},
		{"a\xffb\xc3", `"a\ufffdb\ufffd"`, "a\ufffdb\ufffd"},
		{"\u2028", "\"\u2028\"", "\u2028"},
	} {
		got := string(nexmark.AppendString(nil, tc.in))
		if got != tc.want {
			t.Errorf("AppendString(%q) = %s, want %s", tc.in, got, tc.want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back != tc.decoded {
			t.Errorf("AppendString(%q) = %s reads back as %q (%v), want %q", tc.in, got, back, err, tc.decoded)
		}
	}
}

func TestAppendDecimal3(t *testing.T) {
	for _, tc := range []struct {
		v    int64
		want string
	}{
		{0, "0"}, {1120472, "1120.472"}, {90800, "90.8"}, {908000, "908"}, {5, "0.005"}, {-5, "-0.005"},
		{-1500, "-1.5"}, {100 * 908, "90.8"}, {99_999_999 * 908, "90799999.092"},
		{-9223372036854775808, "-9223372036854775.808"}, {9223372036854775807, "9223372036854775.807"},
	} {
		if got := string(nexmark.AppendDecimal3(nil, tc.v)); got != tc.want {
			t.Errorf("AppendDecimal3(%d) = %s, want %s", tc.v, got, tc.want)
		}
	}
}

// TestObject writes an output row; its text is valid JSON with the fields in order.
func TestObject(t *testing.T) {
	o := nexmark.BeginObject([]byte("x"))
	o.Int("auction", 1007)
	o.String("name", "a\"b")
	o.Decimal3("price", 1234*908)
	got := string(o.End())
	if want := `x{"auction":1007,"name":"a\"b","price":1120.472}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if e := nexmark.BeginObject(nil); string(e.End()) != "{}" {
		t.Fatal("an empty object is not {}")
	}
}

// TestJSONWriterAllocatesNothing: events and rows into a buffer that is large enough.
func TestJSONWriterAllocatesNothing(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{}, 5)
	buf := make([]byte, 0, 4096)
	if a := testing.AllocsPerRun(100, func() {
		for i := range evs {
			buf = nexmark.AppendEvent(buf[:0], &evs[i])
		}
		o := nexmark.BeginObject(buf[:0])
		o.Int("auction", 1)
		o.Decimal3("price", 908)
		o.String("s", "x\n")
		buf = o.End()
	}); a != 0 {
		t.Fatalf("%v allocations", a)
	}
}

// TestLineDecoderRoundTrip: every written event reads back as itself, and as JSON.
func TestLineDecoderRoundTrip(t *testing.T) {
	var d nexmark.LineDecoder
	for i, e := range samples(t) {
		line := nexmark.AppendEvent(nil, &e)
		var got nexmark.Event
		if err := d.Decode(line, &got); err != nil {
			t.Fatalf("event %d: %v: %s", i, err, line)
		}
		if strings.ToValidUTF8(got.Auction.ItemName, "") == got.Auction.ItemName && got != e {
			t.Fatalf("event %d: read back\n%+v\nwant\n%+v", i, got, e)
		}
		if !json.Valid(line) {
			t.Fatalf("event %d: invalid JSON %s", i, line)
		}
	}
}

func TestLineDecoderRefuses(t *testing.T) {
	const bid = `"auction":1,"bidder":2,"price":3,"channel":"c","url":"u","dateTime":4,"extra":""`
	for _, tc := range []struct{ name, line, want string }{
		{"empty", ``, "empty line"},
		{"no key", `{}`, "exactly one of the keys"},
		{"null", `{"bid":null}`, "exactly one of the keys"},
		{"two keys", `{"bid":{` + bid + `},"person":{}}`, "exactly one of the keys"},
		{"unknown key", `{"bids":{` + bid + `}}`, "unknown field"},
		{"unknown field", `{"bid":{` + bid + `,"x":1}}`, `unknown field "x"`},
		{"missing fields", `{"bid":{"auction":1,"bidder":2,"price":3,"channel":"c","dateTime":4}}`, "missing field url, extra"},
		{"missing person field", `{"person":{"id":1}}`, "person: missing field name, emailAddress"},
		{"a string for a number", `{"bid":{` + strings.Replace(bid, `"price":3`, `"price":"3"`, 1) + `}}`, "cannot unmarshal"},
		{"a fraction", `{"bid":{` + strings.Replace(bid, `"price":3`, `"price":3.5`, 1) + `}}`, "cannot unmarshal"},
		{"after the object", `{"bid":{` + bid + `}} {}`, "more after the object"},
		{"truncated", `{"bid":{` + bid, "unexpected EOF"},
		{"a key in another case", `{"bid":{` + strings.Replace(bid, `"price"`, `"Price"`, 1) + `}}`, `unknown field "Price"`},
		{"a kind in another case", `{"Bid":{` + bid + `}}`, `unknown key "Bid"`},
		{"a repeated field", `{"bid":{` + bid + `,"price":3}}`, `repeated field "price"`},
		{"a repeated kind", `{"bid":{` + bid + `},"bid":{` + bid + `}}`, "have more"},
	} {
		var d nexmark.LineDecoder
		var e nexmark.Event
		err := d.Decode([]byte(tc.line), &e)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestJSONFileReads: the events of a file in order, CRLF and a missing final newline included; subtasks
// other than 0 read nothing; an error names the file and the line, also after a restore.
func TestJSONFileReads(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{}, 1200)
	data := string(jsonLines(evs))
	path := writeFile(t, strings.Replace(strings.TrimSuffix(data, "\n"), "\n", "\r\n", 7))
	src := nexmark.JSONFile(path)
	got, _ := poll(t, newReader(t, src, 0, 1), 0)
	if len(got) != len(evs) {
		t.Fatalf("%d events, want %d", len(got), len(evs))
	}
	for i := range evs {
		if got[i] != evs[i] {
			t.Fatalf("event %d differs", i)
		}
	}
	if other, _ := poll(t, newReader(t, src, 1, 2), 0); len(other) != 0 {
		t.Fatalf("subtask 1 read %d events", len(other))
	}

	bad := writeFile(t, data+`{"bid":{}}`+"\n")
	r := newReader(t, nexmark.JSONFile(bad), 0, 1)
	if _, err := drainErr(r); err == nil || !strings.Contains(err.Error(), bad+": line 1201: bid: missing field auction") {
		t.Fatalf("got %v, want an error naming line 1201", err)
	}
	if _, err := nexmark.JSONFile(filepath.Join(t.TempDir(), "missing")).CreateReader(fakeContext{0, 1}); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

func drainErr(r runnel.SourceReader[nexmark.Event]) (int, error) {
	out := &sliceCollector{}
	for range maxPolls {
		st, err := r.PollNext(out)
		if err != nil || st == runnel.EndOfInput {
			return len(out.events), err
		}
	}
	return len(out.events), nil
}

// TestJSONFileRestore: a reader restored from a snapshot reads exactly the rest of the file, and an error
// after it still names the right line.
func TestJSONFileRestore(t *testing.T) {
	evs := generate(t, nexmark.GeneratorConfig{}, 1500)
	path := writeFile(t, string(jsonLines(evs))+"{}\n")
	src := nexmark.JSONFile(path)
	first := newReader(t, src, 0, 1)
	before, _ := poll(t, first, 2)
	state, err := first.(runnel.CheckpointedReader).SnapshotState(1)
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(t, src, 0, 1)
	if err := r.(runnel.CheckpointedReader).RestoreState(state); err != nil {
		t.Fatal(err)
	}
	out := &sliceCollector{}
	var perr error
	for range maxPolls {
		var st runnel.InputStatus
		if st, perr = r.PollNext(out); perr != nil || st == runnel.EndOfInput {
			break
		}
	}
	if perr == nil || !strings.Contains(perr.Error(), "line 1501:") {
		t.Fatalf("after the restore: %v, want an error naming line 1501", perr)
	}
	if len(before) != 1024 || len(out.events)+len(before) < 1024 {
		t.Fatalf("%d events before the snapshot, %d after", len(before), len(out.events))
	}
	for _, bad := range [][]byte{nil, {1}, {0x80, 1}, {1, 0}, {0xff, 0xff, 0xff, 0xff, 0x7f, 1}} {
		if err := newReader(t, src, 0, 1).(runnel.CheckpointedReader).RestoreState(bad); err == nil {
			t.Errorf("RestoreState(% x) accepted", bad)
		}
	}
}
