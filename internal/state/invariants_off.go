//go:build !invariants

package state

// heapChecks holds nothing in builds without the invariants tag (see invariants.go): its checks are
// constant, so that the compiler drops them.
type heapChecks struct{}

// encodeEveryKey reports whether the snapshot writer encodes every key, without the segment cache: never.
func (heapChecks) encodeEveryKey() bool { return false }
