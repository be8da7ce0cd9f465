//go:build !race

package operator

import (
	"testing"
)

// TestWindowPerRecordPathAllocatesNothing feeds window operators records of 64 keys into windows they
// hold already and counts the allocations per record: none, on the default paths and with the built-in
// triggers (the count trigger fires every third record). A window's creation and firing allocate in the
// state backend (a key whose last window went gives up its slot), not per record. Not under the race
// detector, which allocates on its own.
func TestWindowPerRecordPathAllocatesNothing(t *testing.T) {
	// The sums themselves go on, as a window without a process function's do.
	pass := func(s *WindowSpec[int64, keyed, int64, int64, string], tr Trigger[keyed]) *WindowSpec[int64, keyed, int64, int64, int64] {
		return &WindowSpec[int64, keyed, int64, int64, int64]{Key: s.Key, KeyCodec: s.KeyCodec, Assigner: s.Assigner, Lateness: s.Lateness,
			Timed: true, Inc: s.Inc, Trigger: tr, unsliced: s.unsliced,
			NewProcess: func() ProcessWindowFunction[int64, int64, int64] { return PassWindow[int64, int64]{} }}
	}
	for name, spec := range map[string]*WindowSpec[int64, keyed, int64, int64, int64]{
		"tumbling":           pass(tumblingSum(100, 0), nil),
		"tumbling, lateness": pass(tumblingSum(100, 50), nil),
		"sliced":             pass(sumSpec(100, 20, 0, false), nil),
		"sliding":            pass(sumSpec(100, 20, 0, true), nil),
		"count trigger":      pass(tumblingSum(100, 0), CountTrigger[keyed](3)),
		"continuous trigger": pass(tumblingSum(100, 0), ContinuousEventTimeTrigger[keyed](30)),
	} {
		t.Run(name, func(t *testing.T) {
			h := NewHarness[Timed[keyed], Timed[int64]](t, spec, HarnessConfig{})
			const perStep = 1000
			var ts int64
			batch := make([]Timed[keyed], 0, 100)
			step := func() {
				for i := range perStep {
					ts := ts + int64(i%100) // the windows of [1000, 1100)
					batch = append(batch, Timed[keyed]{Ts: ts, V: keyed{K: int64(i % 64), V: 1, Ts: ts}})
					if len(batch) == cap(batch) {
						h.in.CollectBatch(batch)
						batch = batch[:0]
					}
				}
				h.out.got = h.out.got[:0]
			}
			ts = 1000
			step()
			perRecord := testing.AllocsPerRun(20, step) / perStep
			t.Logf("%.4f allocations per record", perRecord)
			if perRecord > 0.01 {
				t.Fatalf("%.4f allocations per record, want none", perRecord)
			}
		})
	}
}
