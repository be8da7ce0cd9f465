//go:build race

package network

// raceEnabled says the race detector is on: it makes allocations of its own, so allocation counts are not
// checked.
const raceEnabled = true
