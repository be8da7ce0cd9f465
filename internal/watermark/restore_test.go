package watermark

import "testing"

// TestNewValveFrom: a valve restored from its snapshot answers the same events as the valve that kept
// running, where a valve restored at the output alone would not (a channel ahead of the output held back
// again); channels that did not count come back active at the output.
func TestNewValveFrom(t *testing.T) {
	type step struct {
		ch   int
		w    Watermark
		want Watermark // the output after the step, in the running and the restored valve
	}
	for _, tc := range []struct {
		name  string
		setup func(v *Valve)
		after []step
		// atFloor is the output a valve restored at the output alone would give after the last step.
		atFloor Watermark
	}{
		{
			name:    "a channel ahead of the output",
			setup:   func(v *Valve) { v.OnWatermark(0, 100); v.OnWatermark(1, 50); v.OnWatermark(2, 70) },
			after:   []step{{1, 120, 70}, {2, 130, 100}},
			atFloor: 50,
		},
		{
			name: "an idle channel comes back at the output",
			setup: func(v *Valve) {
				v.OnWatermark(0, 100)
				v.OnWatermark(1, 50)
				v.OnWatermark(2, 60)
				v.OnIdle(2)
			},
			// The running valve does not wait for the idle channel; the restored one has it active at 50.
			after:   []step{{1, 80, 50}},
			atFloor: 50,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			running := NewValve(3)
			tc.setup(running)
			s := running.Snapshot()
			restored, atFloor := NewValveFrom(s), NewValveAt(3, s.Out)
			if restored.Current() != running.Current() {
				t.Fatalf("restored output %s, running %s", restored.Current(), running.Current())
			}
			for i, st := range tc.after {
				restored.OnWatermark(st.ch, st.w)
				atFloor.OnWatermark(st.ch, st.w)
				running.OnWatermark(st.ch, st.w)
				if restored.Current() != st.want {
					t.Fatalf("step %d: restored output %s, want %s (%s)", i, restored.Current(), st.want, restored)
				}
			}
			if atFloor.Current() != tc.atFloor {
				t.Fatalf("restored at the output alone: %s, want %s", atFloor.Current(), tc.atFloor)
			}
		})
	}
}

// TestNewTwoInputValveFrom: both inputs and the operator's valve come back as they were.
func TestNewTwoInputValveFrom(t *testing.T) {
	v := NewTwoInputValve(2, 1)
	v.OnWatermark(0, 0, 100)
	v.OnWatermark(0, 1, 40)
	v.OnWatermark(1, 0, 90)
	r := NewTwoInputValveFrom(v.Snapshot())
	if r.String() != v.String() {
		t.Fatalf("restored %s, want %s", r, v)
	}
	r.OnWatermark(0, 1, 95)
	v.OnWatermark(0, 1, 95)
	if r.Current() != 90 || v.Current() != 90 {
		t.Fatalf("after a watermark: restored %s, running %s, want 90", r.Current(), v.Current())
	}
}
