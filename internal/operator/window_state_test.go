package operator

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/state"
)

// firings counts, per window, how often it fired (a window state), and per key over all windows (keyed
// state declared in Open: Flink's globalState()), and says so when the window is cleared.
type firings struct {
	global bool
	total  state.ValueState[int64]
}

var firingsState = NewWindowState[int64]("firings", nil, codec.Int64())

func (f *firings) WindowStates() []AnyWindowState { return []AnyWindowState{firingsState} }

func (f *firings) Open(ctx KeyedContext[int64]) (err error) {
	if f.global {
		f.total, err = state.NewValue[int64](KeyedBackend(ctx), "total", codec.Int64())
	}
	return err
}
func (f *firings) Close() error { return nil }

func (f *firings) Process(ctx WindowContext[int64], vs []int64, out Collector[string]) error {
	n, _ := firingsState.Value(ctx)
	firingsState.Update(ctx, n+1)
	total := int64(0)
	if f.global {
		total, _ = f.total.Value()
		f.total.Update(total + 1)
	}
	w := ctx.Window()
	out.Collect(fmt.Sprintf("%d [%d,%d) sum %d firing %d of %d", ctx.CurrentKey(), w.Start, w.End, vs[0], n+1, total+1))
	return nil
}

func (f *firings) Clear(ctx WindowContext[int64]) error {
	n, _ := firingsState.Value(ctx)
	w := ctx.Window()
	EmitSide(ctx, "cleared", fmt.Sprintf("%d [%d,%d) after %d", ctx.CurrentKey(), w.Start, w.End, n))
	return nil
}

// TestPerWindowState, worked out by hand: a window's state lives through its late firings (allowed
// lateness) and goes at its cleanup time, after the function's Clear saw it; keyed state declared in Open
// spans the key's windows. On session windows, window state is refused.
func TestPerWindowState(t *testing.T) {
	for _, global := range []bool{false, true} {
		for _, backend := range []string{"memory", "pebble"} {
			t.Run(fmt.Sprintf("global %v %s", global, backend), func(t *testing.T) {
				spec2 := tumblingSum(1000, 500)
				spec2.NewProcess = func() ProcessWindowFunction[int64, int64, string] { return &firings{global: global} }
				h := NewHarness[Timed[keyed], Timed[string]](t, spec2, HarnessConfig{StateBackend: backend, SideOutputs: []string{"cleared"}})
				feed(h, []keyed{{1, 1, 100}, {-1, 0, 999}, {1, 2, 200}, {1, 4, 1100}})
				snap := h.Snapshot()
				r := NewHarness[Timed[keyed], Timed[string]](t, spec2, HarnessConfig{StateBackend: backend, SideOutputs: []string{"cleared"}, Restore: []Snapshot{snap}})
				feed(r, []keyed{{-1, 0, 1999}, {1, 8, 300}, {-1, 0, math.MaxInt64}})
				all := append(results(h), results(r)...)
				total := func(n int) int {
					if global {
						return n
					}
					return 1
				}
				want := []string{
					fmt.Sprintf("1 [0,1000) sum 1 firing 1 of %d @999", total(1)),
					fmt.Sprintf("1 [0,1000) sum 3 firing 2 of %d @999", total(2)), // late, within the lateness: the state is there
					fmt.Sprintf("1 [1000,2000) sum 4 firing 1 of %d @1999", total(3)),
				}
				if !slices.Equal(all, want) {
					t.Fatalf("got %q, want %q", all, want)
				}
				var cleared []string
				for _, c := range SideOutput[string](r, "cleared") {
					cleared = append(cleared, c.V)
				}
				// 300 comes after [0,1000)'s cleanup time (1499): late, dropped.
				if want := []string{"1 [0,1000) after 2", "1 [1000,2000) after 1"}; !slices.Equal(cleared, want) {
					t.Fatalf("cleared %q, want %q", cleared, want)
				}
				keys := StateKeys[int64](r)
				if want := map[bool]int{false: 0, true: 1}[global]; len(keys) != want {
					t.Fatalf("keys %v hold state at the end, want %d (the global state's)", keys, want)
				}
			})
		}
	}
	sessions := sessionSpec(1000, 0)
	sessions.NewProcess = func() ProcessWindowFunction[int64, int64, string] { return &firings{} }
	_, err := BuildHarness[Timed[keyed], Timed[string]](t, sessions, HarnessConfig{})
	if err == nil || !strings.Contains(err.Error(), "keeps window states, which event-time session windows cannot have") {
		t.Fatalf("window state on sessions: %v", err)
	}
}

// undeclared uses a window state it does not list.
type undeclared struct{ ProcessWindowBaseForTest }

func (undeclared) Process(ctx WindowContext[int64], _ []int64, _ Collector[string]) error {
	firingsState.Update(ctx, 1)
	return nil
}

// TestUndeclaredWindowStateFails names the state and where to list it.
func TestUndeclaredWindowStateFails(t *testing.T) {
	spec := tumblingSum(100, 0)
	spec.NewProcess = func() ProcessWindowFunction[int64, int64, string] { return undeclared{} }
	h := newWindowHarness(t, "memory", spec)
	err := h.Catch(func() { feed(h, []keyed{{1, 1, 10}, {-1, 0, 100}}) })
	if err == nil || !strings.Contains(err.Error(), `window state "firings" is not declared: the window function must list it in WindowStates`) {
		t.Fatalf("got %v", err)
	}
}
