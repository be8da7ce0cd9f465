package run

// Mix is the SplitMix64 finalizer: a bijection of uint64 that spreads every input bit over the output, so
// that Mix(seed ^ n) makes the n-th generated record's fields a pure function of n (and a restored source
// generates the same records again).
func Mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
