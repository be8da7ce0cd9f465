package operator

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/codec"
)

// The tests of triggers, evictors and window states hold the operator to references worked out from
// Flink's documented semantics, computed here with no state backend, no timers and none of the operator's
// code: per key and window, the records, the trigger's count or next firing time, in maps.

func tumblingSum(size, lateness int64) *WindowSpec[int64, keyed, int64, int64, string] {
	s := sumSpec(size, size, lateness, false)
	s.Assigner = TumblingWindows{Size: size, EventTime: true}
	return s
}

// listValues formats a listing window's records: "key [start,end) v1 v2 ...", in the order it got them.
type listValues struct{ ProcessWindowBaseForTest }

func (listValues) Process(ctx WindowContext[int64], vs []keyed, out Collector[string]) error {
	w := ctx.Window()
	var b strings.Builder
	fmt.Fprintf(&b, "%d [%d,%d)", ctx.CurrentKey(), w.Start, w.End)
	for _, v := range vs {
		fmt.Fprintf(&b, " %d", v.V)
	}
	out.Collect(b.String())
	return nil
}

// ProcessWindowBaseForTest gives the tests' process-window functions no-op Open and Close.
type ProcessWindowBaseForTest struct{}

func (ProcessWindowBaseForTest) Open(KeyedContext[int64]) error { return nil }
func (ProcessWindowBaseForTest) Close() error                   { return nil }

func tumblingList(size, lateness int64) *WindowSpec[int64, keyed, struct{}, keyed, string] {
	return &WindowSpec[int64, keyed, struct{}, keyed, string]{
		Key: func(r keyed) int64 { return r.K }, KeyCodec: codec.Int64(), Timed: true, Lateness: lateness,
		Assigner: TumblingWindows{Size: size, EventTime: true}, ElemCodec: codec.MustStruct[keyed](),
		NewProcess: func() ProcessWindowFunction[int64, keyed, string] { return listValues{} },
	}
}

// tumbling is the tumbling window of size that ts is in.
func tumbling(ts, size int64) TimeWindow {
	s := ts - floorMod(ts, size)
	return TimeWindow{Start: s, End: s + size}
}

type refKey struct {
	K int64
	W TimeWindow
}

func sorted(vs []string) []string {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	return vs
}

func checkSame(t *testing.T, what string, got, want []string) {
	t.Helper()
	got, want = sorted(got), sorted(want)
	if len(want) < 20 {
		t.Fatalf("%s: only %d results in the reference", what, len(want))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %d results, want %d\n%s", what, len(got), len(want), firstDiff(got, want))
	}
}

// refCount is CountTrigger(n) (wrapped in PurgingTrigger if purge) on tumbling event-time windows of an
// incremental sum: a window fires at every n-th record it takes, with the sum of its records (since the
// last firing, if purged), and never at its end; a record is late when its window's cleanup time is at or
// below the watermark.
func refCount(script []keyed, size, lateness, n int64, purge bool) []string {
	type st struct{ count, sum int64 }
	ws := map[refKey]*st{}
	wm := int64(math.MinInt64)
	var out []string
	for _, x := range script {
		if x.K < 0 {
			wm = max(wm, x.Ts)
			continue
		}
		w := tumbling(x.Ts, size)
		if w.MaxTimestamp()+lateness <= wm {
			continue
		}
		s := ws[refKey{x.K, w}]
		if s == nil {
			s = &st{}
			ws[refKey{x.K, w}] = s
		}
		s.count++
		s.sum += x.V
		if s.count >= n {
			out = append(out, fmt.Sprintf("%d [%d,%d) %d @%d", x.K, w.Start, w.End, s.sum, w.MaxTimestamp()))
			s.count = 0
			if purge {
				s.sum = 0
			}
		}
	}
	return out
}

// TestCountAndPurgingTriggers: CountTrigger fires every n-th record and keeps the window's contents;
// PurgingTrigger(CountTrigger) fires with the records since the last firing; neither fires at the window's
// end. Out-of-order input with lateness, both backends.
func TestCountAndPurgingTriggers(t *testing.T) {
	script := windowScript(7, 3000, 30)
	for _, purge := range []bool{false, true} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(fmt.Sprintf("purge %v %s", purge, backend), func(t *testing.T) {
				spec := tumblingSum(100, 40)
				spec.Trigger = CountTrigger[keyed](3)
				if purge {
					spec.Trigger = PurgingTrigger(spec.Trigger)
				}
				h := newWindowHarness(t, backend, spec)
				feed(h, script)
				checkSame(t, spec.Trigger.String(), results(h), refCount(script, 100, 40, 3, purge))
				if keys := StateKeys[int64](h); len(keys) != 0 {
					t.Errorf("keys %v hold state after the end of input", keys)
				}
			})
		}
	}
}

// refContinuous is ContinuousEventTimeTrigger(interval) on tumbling event-time windows of an incremental
// sum (Flink's rules): a record in a window whose end the watermark passed fires it at once; otherwise the
// window's end gets a timer, and the window's first record sets the next firing time to the multiple of
// interval after its timestamp. A firing time's timer fires the window and sets the next one an interval
// later; the end's timer fires it; the cleanup time (end plus lateness) drops the window and its next
// firing time. Timers fire in time order when the watermark passes them.
func refContinuous(script []keyed, size, lateness, interval int64) []string {
	type st struct {
		sum, next int64
		hasNext   bool
		timers    map[int64]bool
	}
	ws := map[refKey]*st{}
	wm := int64(math.MinInt64)
	var out []string
	emit := func(k refKey, s *st) {
		out = append(out, fmt.Sprintf("%d [%d,%d) %d @%d", k.K, k.W.Start, k.W.End, s.sum, k.W.MaxTimestamp()))
	}
	for _, x := range script {
		if x.K >= 0 {
			k := refKey{x.K, tumbling(x.Ts, size)}
			cleanup := k.W.MaxTimestamp() + lateness
			if cleanup <= wm {
				continue
			}
			s := ws[k]
			if s == nil {
				s = &st{timers: map[int64]bool{}}
				ws[k] = s
			}
			s.sum += x.V
			s.timers[cleanup] = true
			if k.W.MaxTimestamp() <= wm {
				emit(k, s)
				continue
			}
			s.timers[k.W.MaxTimestamp()] = true
			if !s.hasNext {
				s.next, s.hasNext = x.Ts-x.Ts%interval+interval, true
				s.timers[s.next] = true
			}
			continue
		}
		if x.Ts <= wm {
			continue
		}
		wm = x.Ts
		for {
			// The earliest timer due, of any window.
			var due *refKey
			at := int64(math.MaxInt64)
			for k, s := range ws {
				for ts := range s.timers {
					if ts <= wm && (ts < at || ts == at && due != nil && (k.K < due.K || k.K == due.K && k.W.Start < due.W.Start)) {
						k := k
						due, at = &k, ts
					}
				}
			}
			if due == nil {
				break
			}
			s := ws[*due]
			delete(s.timers, at)
			switch {
			case at == due.W.MaxTimestamp():
				emit(*due, s)
			case s.hasNext && s.next == at:
				s.next = at + interval
				s.timers[s.next] = true
				emit(*due, s)
			}
			if at == due.W.MaxTimestamp()+lateness {
				delete(ws, *due)
			}
		}
	}
	return out
}

// TestContinuousEventTimeTrigger fires windows at the multiples of the interval of event time (aligned to
// the epoch) and at their ends, keeping their contents; with allowed lateness, a late record fires its
// window at once, and firing times up to the cleanup time still fire.
func TestContinuousEventTimeTrigger(t *testing.T) {
	script := windowScript(11, 2000, 30)
	for _, tc := range []struct{ size, lateness, interval int64 }{{100, 0, 30}, {100, 40, 30}, {200, 100, 70}, {99, 0, 33}} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(fmt.Sprintf("%+v %s", tc, backend), func(t *testing.T) {
				spec := tumblingSum(tc.size, tc.lateness)
				spec.Trigger = ContinuousEventTimeTrigger[keyed](tc.interval)
				h := newWindowHarness(t, backend, spec)
				feed(h, script)
				checkSame(t, spec.Trigger.String(), results(h), refContinuous(script, tc.size, tc.lateness, tc.interval))
				if keys := StateKeys[int64](h); len(keys) != 0 {
					t.Errorf("keys %v hold state after the end of input", keys)
				}
			})
		}
	}
}

// refEvicting is a listing tumbling event-time window with the default trigger and evict applied before
// (or after) the function: a window fires when the watermark passes its end, and at once for a record
// within the lateness after that; the function sees the records left by an evictor before it, and the
// window keeps those left by the evictor (after it).
func refEvicting(script []keyed, size, lateness int64, evict func([]keyed) []keyed, after bool) []string {
	ws := map[refKey][]keyed{}
	wm := int64(math.MinInt64)
	var out []string
	fire := func(k refKey) {
		es := ws[k]
		if !after {
			es = evict(es)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%d [%d,%d)", k.K, k.W.Start, k.W.End)
		for _, e := range es {
			fmt.Fprintf(&b, " %d", e.V)
		}
		out = append(out, fmt.Sprintf("%s @%d", b.String(), k.W.MaxTimestamp()))
		if after {
			es = evict(es)
		}
		ws[k] = es
	}
	for _, x := range script {
		if x.K >= 0 {
			k := refKey{x.K, tumbling(x.Ts, size)}
			if k.W.MaxTimestamp()+lateness <= wm {
				continue
			}
			ws[k] = append(slices.Clone(ws[k]), x)
			if k.W.MaxTimestamp() <= wm {
				fire(k)
			}
			continue
		}
		prev := wm
		wm = max(wm, x.Ts)
		for _, k := range slices.Collect(maps.Keys(ws)) {
			if end := k.W.MaxTimestamp(); prev < end && end <= wm {
				fire(k)
			}
			if k.W.MaxTimestamp()+lateness <= wm {
				delete(ws, k)
			}
		}
	}
	return out
}

// TestEvictors holds CountEvictor, TimeEvictor and DeltaEvictor, before and after the function, to the
// reference: what the function sees, and what the window keeps for its late firings.
func TestEvictors(t *testing.T) {
	script := windowScript(5, 2000, 30)
	lastTwo := func(es []keyed) []keyed { return es[max(0, len(es)-2):] }
	within := func(size int64) func([]keyed) []keyed {
		return func(es []keyed) []keyed {
			latest := int64(math.MinInt64)
			for _, e := range es {
				latest = max(latest, e.Ts)
			}
			var kept []keyed
			for _, e := range es {
				if e.Ts > latest-size {
					kept = append(kept, e)
				}
			}
			return kept
		}
	}
	near := func(es []keyed) []keyed {
		var kept []keyed
		for _, e := range es {
			if d := math.Abs(float64(e.V - es[len(es)-1].V)); d < 40 {
				kept = append(kept, e)
			}
		}
		return kept
	}
	delta := func(a, b keyed) float64 { return math.Abs(float64(a.V - b.V)) }
	for _, tc := range []struct {
		name    string
		evictor func(after bool) Evictor[keyed]
		ref     func([]keyed) []keyed
	}{
		{"count", func(after bool) Evictor[keyed] { return CountEvictor[keyed](2, after) }, lastTwo},
		{"time", func(after bool) Evictor[keyed] { return TimeEvictor[keyed](15, after) }, within(15)},
		{"delta", func(after bool) Evictor[keyed] { return DeltaEvictor(40, delta, after) }, near},
	} {
		for _, after := range []bool{false, true} {
			for _, backend := range []string{"memory", "pebble"} {
				t.Run(fmt.Sprintf("%s after %v %s", tc.name, after, backend), func(t *testing.T) {
					spec := tumblingList(100, 40)
					spec.Evictor = tc.evictor(after)
					h := newWindowHarness(t, backend, spec)
					feed(h, script)
					checkSame(t, spec.Evictor.String(), results(h), refEvicting(script, 100, 40, tc.ref, after))
					if keys := StateKeys[int64](h); len(keys) != 0 {
						t.Errorf("keys %v hold state after the end of input", keys)
					}
				})
			}
		}
	}
}

// TestEvictorOnAnIncrementalWindow: an aggregate with an evictor folds the records the evictor leaves.
func TestEvictorOnAnIncrementalWindow(t *testing.T) {
	script := windowScript(9, 2000, 30)
	spec := tumblingSum(100, 0)
	spec.Evictor, spec.ElemCodec = CountEvictor[keyed](2, false), codec.MustStruct[keyed]()
	h := newWindowHarness(t, "memory", spec)
	feed(h, script)
	var want []string
	for _, r := range refEvicting(script, 100, 0, func(es []keyed) []keyed { return es[max(0, len(es)-2):] }, false) {
		// "key [s,e) v1 v2 @ts" as the sum.
		f := strings.Fields(r)
		sum := int64(0)
		for _, v := range f[2 : len(f)-1] {
			var x int64
			fmt.Sscan(v, &x)
			sum += x
		}
		want = append(want, fmt.Sprintf("%s %s %d %s", f[0], f[1], sum, f[len(f)-1]))
	}
	checkSame(t, "sum of the last two", results(h), want)
}

// TestDefaultTriggersThroughTheInterface runs each kind of window with its default trigger built in and
// with EventTimeTrigger (ProcessingTimeTrigger) through the Trigger interface, over the same input: the
// same results, the same late records dropped, nothing left at the end.
func TestDefaultTriggersThroughTheInterface(t *testing.T) {
	script := windowScript(13, 3000, 30)
	for _, a := range []WindowAssigner{
		TumblingWindows{Size: 100, EventTime: true}, SlidingWindows{Size: 100, Slide: 30, EventTime: true},
		SessionWindows{Gap: 20, EventTime: true},
	} {
		for _, lateness := range []int64{0, 40} {
			t.Run(fmt.Sprintf("%s lateness %d", a, lateness), func(t *testing.T) {
				inc := [2]*WindowSpec[int64, keyed, int64, int64, string]{tumblingSum(100, lateness), tumblingSum(100, lateness)}
				list := [2]*WindowSpec[int64, keyed, struct{}, keyed, string]{tumblingList(100, lateness), tumblingList(100, lateness)}
				inc[1].Trigger, list[1].Trigger = EventTimeTrigger[keyed](), EventTimeTrigger[keyed]()
				var got [2][2][]string
				for i := range 2 {
					inc[i].Assigner, list[i].Assigner = a, a
					hi, hl := newWindowHarness(t, "memory", inc[i]), newWindowHarness(t, "memory", list[i])
					feed(hi, script)
					feed(hl, script)
					got[i] = [2][]string{results(hi), results(hl)}
					for _, h := range []*windowHarness{hi, hl} {
						if keys := StateKeys[int64](h); len(keys) != 0 {
							t.Errorf("trigger %v: keys %v hold state after the end of input", inc[i].Trigger, keys)
						}
					}
				}
				checkSame(t, "incremental", got[1][0], got[0][0])
				checkSame(t, "listing", got[1][1], got[0][1])
			})
		}
	}
}

// TestSessionsWithACountTrigger merges session windows under CountTrigger(2), worked out by hand: the
// counts of sessions that merge add up (OnMerge), a firing clears the count, and the window's end does
// not fire.
func TestSessionsWithACountTrigger(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			spec := sessionSpec(1000, 0)
			spec.Trigger = CountTrigger[keyed](2)
			h := newWindowHarness(t, backend, spec)
			// 0 and 500 make [0,1500): two records, it fires (3). 3000 is a session of its own; 1200 extends
			// [0,1500) to [0,2200) (count 0+1); 2100 joins [0,2200) and [3000,4000) into [0,4000): counts 1
			// and 1 merge to 2, the record makes 3: it fires with every record (31).
			feed(h, []keyed{{1, 1, 0}, {1, 2, 500}, {1, 4, 3000}, {1, 8, 1200}, {1, 16, 2100}, {2, 32, 100}, {-1, 0, math.MaxInt64}})
			if got, want := results(h), []string{"1 [0,1500) 3 @1499", "1 [0,4000) 31 @3999"}; !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
			if keys := StateKeys[int64](h); len(keys) != 0 {
				t.Errorf("keys %v hold state after the end of input", keys)
			}
		})
	}
}

// onlyElements is a trigger that cannot merge: it fires at every record.
type onlyElements struct{}

func (onlyElements) OnElement(keyed, int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Fire, nil
}
func (onlyElements) OnEventTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}
func (onlyElements) OnProcessingTime(int64, TimeWindow, TriggerContext) (TriggerResult, error) {
	return Continue, nil
}
func (onlyElements) Clear(TimeWindow, TriggerContext) error { return nil }
func (onlyElements) String() string                         { return "onlyElements" }

// TestTriggerThatCannotMergeIsRefused: a trigger without OnMerge on session windows fails the build,
// naming the trigger and the windows; on tumbling windows it runs.
func TestTriggerThatCannotMergeIsRefused(t *testing.T) {
	spec := sessionSpec(1000, 0)
	spec.Trigger = onlyElements{}
	_, err := BuildHarness[Timed[keyed], Timed[string]](t, spec, HarnessConfig{})
	if err == nil || !strings.Contains(err.Error(), "trigger onlyElements cannot run on event-time session windows") {
		t.Fatalf("build: %v", err)
	}
	tum := tumblingSum(100, 0)
	tum.Trigger = onlyElements{}
	h := newWindowHarness(t, "memory", tum)
	feed(h, []keyed{{1, 1, 10}, {1, 2, 20}})
	if got, want := results(h), []string{"1 [0,100) 1 @99", "1 [0,100) 3 @99"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// TestTriggerStateSurvivesARestore takes a snapshot of a count trigger's window operator halfway and
// restores it into a fresh one: it goes on with the counts (and the continuous trigger with its next firing
// times) as if nothing happened.
func TestTriggerStateSurvivesARestore(t *testing.T) {
	script := windowScript(17, 3000, 30)
	half := len(script) / 2
	for _, mk := range []func() Trigger[keyed]{
		func() Trigger[keyed] { return CountTrigger[keyed](4) },
		func() Trigger[keyed] { return ContinuousEventTimeTrigger[keyed](25) },
	} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(fmt.Sprint(mk(), " ", backend), func(t *testing.T) {
				spec := func() *WindowSpec[int64, keyed, int64, int64, string] {
					s := tumblingSum(100, 30)
					s.Trigger = mk()
					return s
				}
				whole := newWindowHarness(t, backend, spec())
				feed(whole, script[:half])
				snap, emitted := whole.Snapshot(), len(whole.Output())
				feed(whole, script[half:])
				restored := newWindowHarness(t, backend, spec(), snap)
				feed(restored, script[half:])
				checkSame(t, "restored", results(restored), results(whole)[emitted:])
			})
		}
	}
}

// TestContinuousProcessingTimeTrigger, by hand: a processing-time window fires at the multiples of the
// interval after its first record's arrival, with what it holds, until its end.
func TestContinuousProcessingTimeTrigger(t *testing.T) {
	spec := tumblingSum(1000, 0)
	spec.Assigner = TumblingWindows{Size: 1000}
	spec.Trigger = ContinuousProcessingTimeTrigger[keyed](300)
	h := newWindowHarness(t, "memory", spec) // the clock at 1_000_000
	h.SetProcessingTime(1_000_050)
	h.Process(Timed[keyed]{V: keyed{K: 1, V: 1}})
	h.SetProcessingTime(1_000_100)
	h.Process(Timed[keyed]{V: keyed{K: 1, V: 2}})
	h.SetProcessingTime(1_000_300) // fires with 3; next at 600
	h.Process(Timed[keyed]{V: keyed{K: 1, V: 4}})
	h.SetProcessingTime(1_000_999) // 600 and 900 fire with 7; the end clears the window (1200 never fires)
	h.SetProcessingTime(1_002_000)
	want := []string{"1 [1000000,1001000) 3 @1000999", "1 [1000000,1001000) 7 @1000999", "1 [1000000,1001000) 7 @1000999"}
	if got := results(h); !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if keys := StateKeys[int64](h); len(keys) != 0 {
		t.Errorf("keys %v hold state after the window ended", keys)
	}
}
