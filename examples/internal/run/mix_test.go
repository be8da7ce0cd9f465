package run

import "testing"

// TestMix pins SplitMix64's finalizer to the reference values (Vigna's splitmix64.c from state 0: the
// first outputs are the finalizer of 1, 2, 3 times the golden gamma).
func TestMix(t *testing.T) {
	for _, tc := range []struct{ in, want uint64 }{
		{0, 0xe220a8397b1dcdaf},
		{0x9e3779b97f4a7c15, 0x6e789e6aa1b965f4},
		{0x3c6ef372fe94f82a, 0x06c45d188009454f}, // twice the gamma, modulo 2⁶⁴,
	} {
		if got := Mix(tc.in); got != tc.want {
			t.Errorf("Mix(%#x) = %#x, want %#x", tc.in, got, tc.want)
		}
	}
}
