package determinants

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func readAll(t *testing.T, l *Log) []Entry {
	t.Helper()
	r, err := l.Reader()
	if err != nil {
		t.Fatal(err)
	}
	var out []Entry
	for {
		e, ok, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, e)
	}
}

func TestLog(t *testing.T) {
	b := func(c int) Entry { return Entry{Kind: Buffer, Channel: c} }
	ev := func(c int) Entry { return Entry{Kind: Event, Channel: c} }
	tm := func(v int64) Entry { return Entry{Kind: Time, Value: v} }
	type step struct {
		append   []Entry
		mark     int64
		truncate int64
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []Entry
	}{
		{"empty", nil, nil},
		{"every kind, extreme values", []step{{append: []Entry{b(0), ev(1 << 20), {Kind: Buffer, Channel: 2, Value: math.MaxInt64}, tm(math.MinInt64), {Kind: Timers, Value: math.MaxInt64},
			{Kind: Poll, Value: 4096}, {Kind: Watermark, Value: -1}}}},
			[]Entry{b(0), ev(1 << 20), {Kind: Buffer, Channel: 2, Value: math.MaxInt64}, tm(math.MinInt64), {Kind: Timers, Value: math.MaxInt64}, {Kind: Poll, Value: 4096}, {Kind: Watermark, Value: -1}}},
		{"truncate at a mark", []step{{append: []Entry{b(0), b(1)}}, {mark: 3}, {append: []Entry{b(2)}}, {truncate: 3}}, []Entry{b(2)}},
		{"truncate at a later mark drops the older ones", []step{{append: []Entry{b(0)}}, {mark: 3}, {append: []Entry{b(1)}}, {mark: 4},
			{append: []Entry{b(2)}}, {truncate: 4}}, []Entry{b(2)}},
		{"completion of a checkpoint without a mark keeps everything", []step{{append: []Entry{b(0)}}, {mark: 5}, {append: []Entry{b(1)}}, {truncate: 4}},
			[]Entry{b(0), b(1)}},
		{"completion of an older checkpoint forgets its mark only", []step{{append: []Entry{b(0)}}, {mark: 3}, {append: []Entry{b(1)}}, {mark: 4},
			{truncate: 3}, {truncate: 4}}, nil},
		{"everything truncated, then more", []step{{append: []Entry{b(0)}}, {mark: 1}, {truncate: 1}, {append: []Entry{b(7)}}}, []Entry{b(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tc.steps {
				for _, e := range s.append {
					if err := l.Append(e); err != nil {
						t.Fatal(err)
					}
				}
				if s.mark != 0 {
					if err := l.Mark(s.mark); err != nil {
						t.Fatal(err)
					}
				}
				if s.truncate != 0 {
					l.Truncate(s.truncate)
				}
			}
			if got := readAll(t, l); fmt.Sprint(got) != fmt.Sprint(tc.want) || l.Len() != int64(len(tc.want)) {
				t.Fatalf("entries %v (Len %d), want %v", got, l.Len(), tc.want)
			}
			// A restore of the last checkpoint truncated to (or of none) replays what the log holds.
			var last int64
			for _, s := range tc.steps {
				if s.truncate != 0 {
					last = s.truncate
				}
			}
			if rd, err := l.ReaderAt(last); err == nil {
				var got []Entry
				for {
					e, ok, err := rd.Next()
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						break
					}
					got = append(got, e)
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("ReaderAt(%d): %v, want %v", last, got, tc.want)
				}
			} else if last == 0 || tc.name != "completion of a checkpoint without a mark keeps everything" {
				t.Fatalf("ReaderAt(%d): %v", last, err)
			}
		})
	}
}

func TestLogRefuses(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("a log without bounds was made")
	}
	l, _ := New(Config{MaxBytes: 15, MaxMarks: 2})
	for _, e := range []Entry{{}, {Kind: maxKind + 1}, {Kind: Buffer, Channel: -1}, {Kind: Event, Channel: 1, Value: -1}} {
		if err := l.Append(e); err == nil || errors.Is(err, ErrBroken) {
			t.Errorf("Append(%v): %v, want a refusal that does not break the log", e, err)
		}
	}
	if err := l.Mark(5); err != nil {
		t.Fatal(err)
	}
	if err := l.Mark(5); err == nil || l.Broken() != nil {
		t.Fatalf("a repeated mark: %v (broken %v)", err, l.Broken())
	}
	for range 5 {
		if err := l.Append(Entry{Kind: Buffer, Channel: 1}); err != nil {
			t.Fatal(err)
		}
	}
	err := l.Append(Entry{Kind: Buffer, Channel: 1})
	if !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "18 bytes") || !strings.Contains(err.Error(), "bound of 15") {
		t.Fatalf("append past the bound: %v", err)
	}
	if _, err := l.Reader(); !errors.Is(err, ErrBroken) {
		t.Fatalf("a broken log gave a reader: %v", err)
	}
	if err := l.Mark(6); !errors.Is(err, ErrBroken) {
		t.Fatalf("mark on a broken log: %v", err)
	}
	l.Reset()
	if err := l.Append(Entry{Kind: Poll, Value: 3}); err != nil || l.Broken() != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if err := l.Mark(1); err != nil {
		t.Fatal(err)
	}
	if err := l.Mark(2); err != nil {
		t.Fatal(err)
	}
	if err := l.Mark(3); !errors.Is(err, ErrBroken) || !strings.Contains(err.Error(), "3 checkpoints") {
		t.Fatalf("a mark past MaxMarks: %v", err)
	}
}

// TestLogRandom drives a log and a plain slice with the same seeded appends, marks and truncations, over
// many segments, and checks after each step that a reader gives the slice and Len and Bytes agree; a reader
// opened before further appends reads them too (a replay reads what is appended while it runs).
func TestLogRandom(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 9))
		l, _ := New(Config{MaxBytes: 1 << 30, MaxMarks: 1 << 10})
		var model []Entry
		type modelMark struct {
			id int64
			at int
		}
		var marks []modelMark
		next := int64(1)
		live, _ := l.Reader()
		liveRead := 0
		for op := range 1500 {
			switch r := rng.IntN(100); {
			case r < 80:
				for range rng.IntN(600) {
					var e Entry
					switch rng.IntN(3) {
					case 0:
						e = Entry{Kind: Buffer, Channel: rng.IntN(1 << uint(rng.IntN(30))), Value: rng.Int64N(1 << uint(rng.IntN(62)))}
					case 1:
						e = Entry{Kind: Time, Value: rng.Int64() - math.MaxInt64/2}
					default:
						e = Entry{Kind: Poll, Value: int64(rng.IntN(10))}
					}
					if err := l.Append(e); err != nil {
						t.Fatal(err)
					}
					model = append(model, e)
				}
			case r < 92:
				if err := l.Mark(next); err != nil {
					t.Fatal(err)
				}
				marks = append(marks, modelMark{next, len(model)})
				next += 1 + int64(rng.IntN(2))
			default:
				if len(marks) == 0 {
					continue
				}
				m := marks[rng.IntN(len(marks))]
				l.Truncate(m.id)
				for len(marks) > 0 && marks[0].id <= m.id {
					marks = marks[1:]
				}
				model = model[m.at:]
				for i := range marks {
					marks[i].at -= m.at
				}
				live, liveRead = nil, 0 // truncation may drop what a reader is at
			}
			if op%97 == 0 || op == 1499 {
				if got := readAll(t, l); !slices.Equal(got, model) {
					t.Fatalf("seed %d op %d: %d entries read, want %d", seed, op, len(got), len(model))
				}
				if l.Len() != int64(len(model)) {
					t.Fatalf("seed %d op %d: Len %d, want %d", seed, op, l.Len(), len(model))
				}
			}
			if live == nil {
				live, _ = l.Reader()
			}
			for {
				e, ok, err := live.Next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if e != model[liveRead] {
					t.Fatalf("seed %d op %d: live reader's entry %d is %v, want %v", seed, op, liveRead, e, model[liveRead])
				}
				liveRead++
			}
		}
	}
}

// TestLogBytesBounded: a log truncated at every checkpoint keeps its memory: segments are reused, and an
// append allocates nothing in steady state.
func TestLogBytesBounded(t *testing.T) {
	l, _ := New(DefaultConfig())
	id := int64(0)
	round := func() {
		for range 30_000 {
			if err := l.Append(Entry{Kind: Buffer, Channel: 3}); err != nil {
				t.Fatal(err)
			}
		}
		id++
		if err := l.Mark(id); err != nil {
			t.Fatal(err)
		}
		l.Truncate(id - 1)
	}
	for range 5 {
		round()
	}
	if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
		t.Fatalf("%v allocations per round of 30000 appends, a mark and a truncation", allocs)
	}
	if l.Bytes() != 30_000*3 { // kind, channel, records emitted (0)
		t.Fatalf("%d bytes kept", l.Bytes())
	}
}
