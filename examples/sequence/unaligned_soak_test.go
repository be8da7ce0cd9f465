//go:build soak

package sequence_test

import "testing"

// TestUnalignedPropertySoak is the long version of TestUnalignedProperty: UNALIGNED_RUNS (default 120)
// seeded runs, the failover strategies in turn, the fallbacks counted by reason (about five minutes on two
// cores):
//
//	go test -tags soak -run UnalignedPropertySoak -v ./examples/sequence
func TestUnalignedPropertySoak(t *testing.T) {
	unalignedPropertyTest(t, uint64(envInt(t, "UNALIGNED_SEED", 1)), envInt(t, "UNALIGNED_RUNS", 120))
}
