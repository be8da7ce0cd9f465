package barrier_test

import (
	"fmt"

	"github.com/runnel-dev/runnel/internal/barrier"
)

// A task with three input channels aligns checkpoint 1; then a producer restarts during checkpoint 2.
func Example() {
	a := barrier.New(3, barrier.ExactlyOnce)
	cp := func(id int64) barrier.Checkpoint { return barrier.Checkpoint{ID: id, TimestampMillis: 1000 * id} }
	fmt.Println(a.OnBarrier(0, cp(1))) // stop reading channel 0
	fmt.Println(a.OnBarrier(2, cp(1))) // and channel 2
	fmt.Println(a.OnBarrier(1, cp(1))) // aligned
	fmt.Println(a.OnBarrier(1, cp(2))) // the next checkpoint
	fmt.Println(a.OnChannelReset(0))   // its barrier will not come on channel 0
	fmt.Println(a.OnBarrier(2, cp(2))) // late
	fmt.Println(a.OnBarrier(0, cp(3)), "|", a)
	// Output:
	// block [0]
	// block [2]
	// snapshot #1, unblock all
	// block [1]
	// abort #2 (channel reset), unblock all
	// dropped
	// block [0] | exactly-once, 3 channels, aligning #3 (received [0], blocked [0]), completed #1, done #2
}
