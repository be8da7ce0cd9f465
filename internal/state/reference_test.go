//go:build !invariants

package state

import "testing"

// newReference makes the backend that the segment cache and delta tests hold the heap writer to: without
// the invariants tag (which compiles in the heap writer's encode-every-key mode, reference_invariants_test.go),
// a pebble backend, whose writer shares nothing with the heap's but the format, canonical for equal
// contents.
func newReference(t *testing.T, now func() int64) *segStates {
	t.Helper()
	kb, err := NewPebble[int64](Options[int64]{MaxParallelism: 16, KeyGroupEnd: 15, Now: now, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return declareSegStates(t, kb)
}
