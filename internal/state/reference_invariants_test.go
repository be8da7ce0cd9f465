//go:build invariants

package state

import "testing"

// newReference makes the backend that the segment cache and delta tests hold the heap writer to: with the
// invariants tag, a heap backend whose writer encodes every key (heapChecks.encodeAll), so that every
// snapshot is what the cached writer must write byte for byte, found by the writer's own slow path.
func newReference(t *testing.T, now func() int64) *segStates {
	t.Helper()
	kb, err := NewHeap[int64](Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	kb.(*heapBackend[int64]).checks.encodeAll = true
	s := declareSegStates(t, kb)
	t.Cleanup(func() {
		// A reference that used the cache would hold the cache to itself.
		for name, sc := range map[string]*segCache{
			"map": s.m.(*heapMap[benchWindow, int64]).sc, "list": s.l.(*heapList[string]).sc,
			"list map": s.lm.(*heapListMap[int32, int64]).sc, "timers": s.timers.(*heapTimers).sc,
		} {
			if sc != nil && (sc.reused > 0 || sc.dataAt != 0) {
				t.Errorf("reference %s state: the writer used its segment cache", name)
			}
		}
	})
	return s
}
