package watermark_test

import (
	"fmt"
	"time"

	"github.com/runnel-dev/runnel/internal/watermark"
)

// A task with three input channels: one goes idle, one finishes, and one is reconnected to a new producer
// attempt that starts from the beginning of event time.
func Example() {
	v := watermark.NewValve(3)
	fmt.Println(v.OnWatermark(0, 1000))
	fmt.Println(v.OnWatermark(1, 2000))
	fmt.Println(v.OnWatermark(2, 1500)) // every channel delivered one
	fmt.Println(v.OnIdle(0))            // channel 0 no longer holds the output back
	fmt.Println(v.OnChannelReset(1))    // a new attempt behind channel 1: catching up
	fmt.Println(v.OnWatermark(1, 500))  // below the output: does not count yet
	fmt.Println(v.OnWatermark(2, 2500)) // channel 2 alone counts
	fmt.Println(v.OnWatermark(1, 400))  // a channel never goes back
	fmt.Println(v.OnFinished(2))
	fmt.Println(v)
	// Output:
	// min
	// min
	// 1000 advanced
	// 1500 advanced
	// 1500
	// 1500
	// 2500 advanced
	// 2500, ignored (behind)
	// 2500
	// active, output 2500: 0=idle:1000 1=500 catching up 2=finished
}

// A source with records up to 5 s out of order, idle after a minute without records.
func ExampleBoundedOutOfOrderness() {
	g := watermark.BoundedOutOfOrderness(5 * time.Second)
	for _, ts := range []int64{10_000, 7_000, 12_000} {
		g.OnEvent(ts)
	}
	fmt.Println(g.OnPeriodic())
	fmt.Println(g.OnPeriodic())
	d := watermark.IdleAfter(time.Minute)
	fmt.Println(d.Tick(0), d.Tick(30_000), d.Tick(60_000), d.OnEvent())
	// Output:
	// 6999 true
	// 6999 false
	// false false true true
}
