package operator

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/task"
)

type countCollector struct{ n int }

func (c *countCollector) Collect(int) { c.n++ }

// TestInjectionsOfOneSubtaskAllFire feeds records through the injector of one subtask that has several
// injections, as its attempts would: a fired injection ends the attempt (the record is not passed on), and
// the next attempt goes on counting. Every injection fires once, in the order of its trigger; injections
// due together fire in successive attempts, in the order given.
func TestInjectionsOfOneSubtaskAllFire(t *testing.T) {
	type fire struct {
		record int // 1-based number of the record, over all attempts, at which it fired
		spec   string
	}
	cases := []struct {
		name    string
		specs   []*Injection
		armAt   int // Arm the time-based injections before this record (0: never)
		records int
		// complete holds, by record, the checkpoint that completes before that record.
		complete map[int]int64
		want     []fire
	}{
		{"one", []*Injection{{AfterRecords: 3, Spec: "a@3"}}, 0, 10, nil, []fire{{3, "a@3"}}},
		{"two in order", []*Injection{{AfterRecords: 1000, Spec: "a@1000"}, {AfterRecords: 5000, Spec: "a@5000"}}, 0, 6000,
			nil, []fire{{1000, "a@1000"}, {5000, "a@5000"}}},
		{"two given in reverse order fire by trigger", []*Injection{{AfterRecords: 5000, Spec: "a@5000"}, {AfterRecords: 1000, Spec: "a@1000"}}, 0, 6000,
			nil, []fire{{1000, "a@1000"}, {5000, "a@5000"}}},
		{"the same spec twice fails twice", []*Injection{{AfterRecords: 7, Spec: "a@7"}, {AfterRecords: 7, Spec: "a@7'"}}, 0, 20,
			nil, []fire{{7, "a@7"}, {8, "a@7'"}}},
		{"time-based armed together fire in successive attempts", []*Injection{{After: time.Second, Spec: "a@1s"}, {After: 2 * time.Second, Spec: "a@2s"}}, 5, 20,
			nil, []fire{{5, "a@1s"}, {6, "a@2s"}}},
		{"time and count", []*Injection{{After: time.Second, Spec: "a@1s"}, {AfterRecords: 4, Spec: "a@4"}}, 4, 20,
			nil, []fire{{4, "a@1s"}, {5, "a@4"}}},
		{"never armed never fires", []*Injection{{After: time.Second, Spec: "a@1s"}}, 0, 20, nil, nil},
		{"not reached never fires", []*Injection{{AfterRecords: 21, Spec: "a@21"}}, 0, 20, nil, nil},
		{"a checkpoint before its own does not arm it", []*Injection{{AfterCheckpoint: 3, Spec: "a@chk-3"}}, 0, 20,
			map[int]int64{4: 1, 8: 2, 12: 3}, []fire{{12, "a@chk-3"}}},
		{"a later checkpoint arms it too", []*Injection{{AfterCheckpoint: 3, Spec: "a@chk-3"}}, 0, 20,
			map[int]int64{4: 2, 7: 5}, []fire{{7, "a@chk-3"}}},
		{"checkpoint and count", []*Injection{{AfterCheckpoint: 1, Spec: "a@chk-1"}, {AfterRecords: 10, Spec: "a@10"}}, 0, 20,
			map[int]int64{3: 1}, []fire{{3, "a@chk-1"}, {10, "a@10"}}},
		{"no checkpoint, no failure", []*Injection{{AfterCheckpoint: 1, Spec: "a@chk-1"}}, 0, 20, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			next := &countCollector{}
			c := wrapIn[int](&Context{injs: tc.specs}, next)
			var got []fire
			for r := 1; r <= tc.records; r++ {
				if id, ok := tc.complete[r]; ok {
					for _, inj := range tc.specs {
						inj.checkpointComplete(id)
					}
				}
				if r == tc.armAt {
					for _, inj := range tc.specs {
						if inj.After > 0 {
							inj.Arm()
						}
					}
				}
				func() {
					defer func() {
						if p := recover(); p != nil {
							var f *task.Failure
							if err, ok := p.(error); !ok || !errors.As(err, &f) {
								panic(p)
							}
							var inj *InjectedFailure
							if !errors.As(f, &inj) || "injected failure "+inj.Spec != f.Err.Error() {
								t.Fatalf("the failure %v is not an InjectedFailure naming its spec", f)
							}
							got = append(got, fire{r, f.Err.Error()})
						}
					}()
					c.Collect(r)
				}()
			}
			var want []fire
			for _, w := range tc.want {
				want = append(want, fire{w.record, "injected failure " + w.spec})
			}
			if !slices.Equal(got, want) {
				t.Fatalf("fired %v, want %v", got, want)
			}
			if next.n != tc.records-len(want) {
				t.Fatalf("%d records passed on, want %d", next.n, tc.records-len(want))
			}
			for _, inj := range tc.specs {
				fired := slices.ContainsFunc(want, func(f fire) bool { return f.spec == fmt.Sprintf("injected failure %s", inj.Spec) })
				if inj.Fired() != fired {
					t.Errorf("%s: Fired() = %v", inj.Spec, inj.Fired())
				}
			}
		})
	}
}

// TestNoInjectionNoWrapper keeps the record path of an operator without injections free of the injector.
func TestNoInjectionNoWrapper(t *testing.T) {
	next := &countCollector{}
	if c := wrapIn[int](&Context{}, next); c != Collector[int](next) {
		t.Fatalf("wrapped: %T", c)
	}
}

// TestMarkedInjectionsDoNotFire: an injection that fired in another process (the job master's fired set,
// carried in the deployment) is marked before the chain is built and never fires here, while the others of
// the subtask fire as they would; the failure of one that fires names its index.
func TestMarkedInjectionsDoNotFire(t *testing.T) {
	cases := []struct {
		name    string
		marked  []int // indexes marked fired before the first record
		records int
		want    []int // indexes that fire here, in order
	}{
		{"none marked", nil, 20, []int{0, 1}},
		{"the first marked", []int{0}, 20, []int{1}},
		{"both marked", []int{0, 1}, 20, nil},
		{"the second marked", []int{1}, 20, []int{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			injs := []*Injection{{AfterRecords: 3, Spec: "a[0]@3", Index: 0}, {AfterRecords: 5, Spec: "a[0]@5", Index: 1}}
			for _, i := range tc.marked {
				injs[i].SetFired(true)
			}
			c := wrapIn[int](&Context{injs: injs}, &countCollector{})
			var got []int
			for r := 1; r <= tc.records; r++ {
				func() {
					defer func() {
						if p := recover(); p != nil {
							var inj *InjectedFailure
							if err, ok := p.(error); !ok || !errors.As(err, &inj) {
								panic(p)
							}
							if inj.Spec != injs[inj.Index].Spec {
								t.Fatalf("failure %v: index %d is %s", inj, inj.Index, injs[inj.Index].Spec)
							}
							got = append(got, inj.Index)
						}
					}()
					c.Collect(r)
				}()
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("fired %v, want %v", got, tc.want)
			}
			for _, inj := range injs {
				if !inj.Fired() {
					t.Errorf("%s: not fired nor marked", inj.Spec)
				}
			}
		})
	}
}
