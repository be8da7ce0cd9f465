//go:build invariants

package state

// heapChecks is what a heap backend built with the invariants tag can be asked to check, by tests: slow
// references that the fast paths are held to, compiled out of other builds (invariants_off.go).
type heapChecks struct {
	// encodeAll makes the snapshot writer encode every key, without the segment cache: the reference
	// that tests hold the cache to.
	encodeAll bool
}

// encodeEveryKey reports whether the snapshot writer encodes every key, without the segment cache.
func (c heapChecks) encodeEveryKey() bool { return c.encodeAll }
