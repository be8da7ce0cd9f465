package operator

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// sessionSpec is an event-time session window of gap ms that sums the records' values: incrementally, or
// listing the records (listing) and summing them when the window fires.
func sessionSpec(gap, lateness int64) *WindowSpec[int64, keyed, int64, int64, string] {
	s := sumSpec(0, 0, lateness, false)
	s.Assigner = SessionWindows{Gap: gap, EventTime: true}
	return s
}

func listingSessionSpec(gap, lateness int64) *WindowSpec[int64, keyed, struct{}, keyed, string] {
	c, err := codec.Struct[keyed]()
	if err != nil {
		panic(err)
	}
	return &WindowSpec[int64, keyed, struct{}, keyed, string]{
		Key:        func(r keyed) int64 { return r.K },
		KeyCodec:   codec.Int64(),
		Assigner:   SessionWindows{Gap: gap, EventTime: true},
		Lateness:   lateness,
		Timed:      true,
		ElemCodec:  c,
		NewProcess: func() ProcessWindowFunction[int64, keyed, string] { return sumListing{} },
	}
}

// sumListing formats a listing window's sum as sumWindow does an incremental one's.
type sumListing struct{}

func (sumListing) Open(KeyedContext[int64]) error { return nil }
func (sumListing) Close() error                   { return nil }
func (sumListing) Process(ctx WindowContext[int64], vs []keyed, out Collector[string]) error {
	w, sum := ctx.Window(), int64(0)
	for _, v := range vs {
		sum += v.V
	}
	out.Collect(fmt.Sprintf("%d [%d,%d) %d", ctx.CurrentKey(), w.Start, w.End, sum))
	return nil
}

// TestSessionWindowsMergeWhenTheyTouch holds session windows to Flink's rule for merging: two windows
// merge when they overlap or touch, start <= other.end && end >= other.start (TimeWindow.intersects), so
// with a gap of 1000 ms records at 0 and 1000 make one session [0, 2000), not [0, 1000) and [1000, 2000).
// The expected sessions are worked out by hand from that rule: a record at t is the window [t, t+gap),
// merged with every window of its key it touches. Incremental and listing windows, both backends.
func TestSessionWindowsMergeWhenTheyTouch(t *testing.T) {
	const end = math.MaxInt64
	wm := func(ts int64) keyed { return keyed{K: -1, Ts: ts} }
	for _, tc := range []struct {
		name     string
		lateness int64
		script   []keyed
		want     []string
	}{
		{"touching", 0, []keyed{{1, 1, 0}, {1, 2, 1000}, wm(end)},
			[]string{"1 [0,2000) 3 @1999"}},
		{"a chain of touching", 0, []keyed{{1, 1, 0}, {1, 2, 1000}, {1, 4, 2000}, wm(end)},
			[]string{"1 [0,3000) 7 @2999"}},
		// [0,1000) and [2000,3000) are apart; [1000,2000) touches both, so all three merge.
		{"a record that touches two", 0, []keyed{{1, 1, 0}, {1, 2, 2000}, {1, 4, 1000}, wm(end)},
			[]string{"1 [0,3000) 7 @2999"}},
		// [0,1000) and [1001,2001): 1000 >= 1001 is false, so they stay apart.
		{"one millisecond apart", 0, []keyed{{1, 1, 0}, {1, 2, 1001}, wm(end)},
			[]string{"1 [0,1000) 1 @999", "1 [1001,2001) 2 @2000"}},
		{"touching at the start", 0, []keyed{{1, 1, 1000}, {1, 2, 0}, wm(end)},
			[]string{"1 [0,2000) 3 @1999"}},
		{"other keys apart", 0, []keyed{{1, 1, 0}, {2, 2, 1000}, wm(end)},
			[]string{"1 [0,1000) 1 @999", "2 [1000,2000) 2 @1999"}},
		// [0,1000) fired at watermark 999 and is kept until 1499; [1000,2000) is not late (its cleanup time
		// is 2499) and touches it, so they merge and the union fires at its end with both records.
		{"touching a fired session within the lateness", 500, []keyed{{1, 1, 0}, wm(999), {1, 2, 1000}, wm(end)},
			[]string{"1 [0,1000) 1 @999", "1 [0,2000) 3 @1999"}},
	} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(tc.name+"/"+backend, func(t *testing.T) {
				inc := newWindowHarness(t, backend, sessionSpec(1000, tc.lateness))
				listing := newWindowHarness(t, backend, listingSessionSpec(1000, tc.lateness))
				for _, h := range []*windowHarness{inc, listing} {
					feed(h, tc.script)
					got := results(h)
					slices.Sort(got)
					if !slices.Equal(got, tc.want) {
						t.Errorf("incremental %v: got %q, want %q", h == inc, got, tc.want)
					}
					if keys := StateKeys[int64](h); len(keys) != 0 {
						t.Errorf("incremental %v: %d keys hold state after the end of input", h == inc, len(keys))
					}
				}
			})
		}
	}
}

// TestRestoredTouchingSessionsMerge restores a checkpoint in which a key holds two touching sessions, as
// a build that merged only overlapping sessions wrote it (with the key's list of sessions, and from before
// the lists), and a key whose sessions are apart: the touching ones merge at the restore, so one window
// fires with both contents at the union's end and neither old end fires; the others stay as they were.
func TestRestoredTouchingSessionsMerge(t *testing.T) {
	for _, listed := range []bool{true, false} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(fmt.Sprintf("listed %v %s", listed, backend), func(t *testing.T) {
				ctx := windowTestContext(backend)
				spec := sessionSpec(1000, 0)
				b, err := newKeyedBackend(ctx, spec.KeyCodec)
				if err != nil {
					t.Fatal(err)
				}
				op, err := newWindowOp(ctx, spec, b)
				if err != nil {
					t.Fatal(err)
				}
				for key, ws := range map[int64][]TimeWindow{1: {{0, 1000}, {1000, 2000}}, 2: {{0, 1000}, {1500, 2500}}} {
					b.SetCurrentKey(key)
					var set []sessionWindow
					for i, w := range ws {
						op.contents.(*incrementalContents[keyed, int64, int64]).acc.Put(w, int64(i+1))
						op.timers.Register(w.MaxTimestamp(), state.Namespace{A: w.Start, B: w.End})
						set = append(set, sessionWindow{W: w, State: w})
					}
					if listed {
						op.sessions.sessions.Update(set)
					}
				}
				write, err := b.Snapshot(1)
				if err != nil {
					t.Fatal(err)
				}
				var snap bytes.Buffer
				if err := write(&snap); err != nil {
					t.Fatal(err)
				}
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				h := newWindowHarness(t, backend, sessionSpec(1000, 0), Snapshot{State: snap.Bytes(), Watermark: math.MinInt64})
				feed(h, []keyed{{K: -1, Ts: 999}})
				if got, want := results(h), []string{"2 [0,1000) 1 @999"}; !slices.Equal(got, want) {
					t.Fatalf("at watermark 999: %q, want %q (key 1's [0,1000) merged: it does not fire)", got, want)
				}
				feed(h, []keyed{{K: 1, V: 4, Ts: 2000}, {K: -1, Ts: math.MaxInt64}})
				got := results(h)
				slices.Sort(got)
				want := []string{"1 [0,3000) 7 @2999", "2 [0,1000) 1 @999", "2 [1500,2500) 2 @2499"}
				if !slices.Equal(got, want) {
					t.Fatalf("got %q, want %q", got, want)
				}
				if keys := StateKeys[int64](h); len(keys) != 0 {
					t.Errorf("%d keys hold state after the end of input", len(keys))
				}
			})
		}
	}
}
