package state

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/codec"
	"github.com/runnel-dev/runnel/internal/checkpoint"
)

// benchWindow is the namespace of the window operator's state: a window's bounds.
type benchWindow struct{ Start, End int64 }

// BenchmarkSnapshotWindows is the state of Nexmark q5's counting window operator under checkpoints: per
// key (auction), a map from each of its 5 sliding windows to a count and one event-time timer per window,
// 50,000 keys in 64 of 128 key groups. Between two snapshots, changed of the keys add a record to one window
// (the rest stay as they were, as the bids of old auctions stop). It reports what a checkpoint costs the task
// goroutine (capture, ns/op), the writer (write-ns/op) and the records after it (cow-ns/op: the updates
// made between two snapshots, which copy what the last snapshot shares).
func BenchmarkSnapshotWindows(b *testing.B) {
	const keys, windows = 50_000, 5
	for _, bc := range []struct {
		name    string
		changed int
	}{{"changed=all", keys}, {"changed=10pct", keys / 10}} {
		b.Run(bc.name, func(b *testing.B) {
			kb, acc, timers := newWindowState(b, 63)
			// Keys of key groups [0, 63] only.
			var owned []int64
			var enc []byte
			for k := int64(0); len(owned) < keys; k++ {
				enc, _ = codec.Int64().Append(enc[:0], k)
				if KeyGroup(enc, 128) <= 63 {
					owned = append(owned, k)
				}
			}
			add := func(k int64, w int) {
				kb.SetCurrentKey(k)
				win := benchWindow{Start: int64(w) * 2000, End: int64(w)*2000 + 10_000}
				n, ok := acc.Get(win)
				acc.Put(win, n+1)
				if !ok {
					timers.Register(win.End-1, Namespace{A: win.Start, B: win.End})
				}
			}
			for _, k := range owned {
				for w := range windows {
					add(k, w)
				}
			}
			// Two writes first, as a long job's checkpoints find the writer: its caches built and sized.
			for i := range 2 {
				write, err := kb.Snapshot(int64(i - 2))
				if err != nil {
					b.Fatal(err)
				}
				if err := write(io.Discard); err != nil {
					b.Fatal(err)
				}
			}
			var writeNs, cowNs int64
			next := 0
			b.ResetTimer()
			for i := range b.N {
				writeNs += captureAndWrite(b, kb, int64(i))
				start := time.Now()
				for range bc.changed {
					add(owned[next%keys], next%windows)
					next++
				}
				cowNs += time.Since(start).Nanoseconds()
				b.StartTimer()
			}
			b.ReportMetric(float64(writeNs)/float64(b.N), "write-ns/op")
			b.ReportMetric(float64(cowNs)/float64(b.N), "cow-ns/op")
		})
	}
}

// BenchmarkDeltaWindows is q5's window state under checkpoints: live keys (auctions), each with 5 sliding
// windows counted in a map and a timer per window, of which between two checkpoints a quarter go (their
// windows fire: the map is cleared and the timers deleted, which frees the key) and as many new ones
// come, as new auctions take the bids. It reports what the writer costs (write-ns/op), of a delta under
// incremental checkpoints or of a full snapshot, next to the capture on the task goroutine (ns/op).
func BenchmarkDeltaWindows(b *testing.B) {
	const windows = 5
	for _, bc := range []struct {
		live int
		full bool
	}{{50_000, false}, {300_000, false}, {50_000, true}, {300_000, true}} {
		live, mode := bc.live, "delta"
		if bc.full {
			mode = "full"
		}
		b.Run(fmt.Sprintf("keys=%d/%s", live, mode), func(b *testing.B) {
			kb, acc, timers := newWindowState(b, 127)
			win := func(w int) benchWindow { return benchWindow{Start: int64(w) * 2000, End: int64(w)*2000 + 10_000} }
			add := func(k int64) {
				kb.SetCurrentKey(k)
				for w := range windows {
					acc.Put(win(w), k)
					timers.Register(win(w).End-1, Namespace{A: win(w).Start, B: win(w).End})
				}
			}
			drop := func(k int64) {
				kb.SetCurrentKey(k)
				for w := range windows {
					timers.Delete(win(w).End-1, Namespace{A: win(w).Start, B: win(w).End})
				}
				acc.Clear()
			}
			for k := range int64(live) {
				add(k)
			}
			first, next := int64(0), int64(live)
			write := func(i int) time.Duration {
				full, delta, err := SnapshotIncremental(kb, int64(i+4))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				start := time.Now()
				if bc.full {
					err = full(io.Discard)
				} else {
					_, err = delta(io.Discard)
				}
				if err != nil {
					b.Fatal(err)
				}
				took := time.Since(start)
				for range live / 4 {
					drop(first)
					add(next)
					first, next = first+1, next+1
				}
				b.StartTimer()
				return took
			}
			write(-3) // as a long job's checkpoints find the writer: its caches built and sized
			write(-2)
			write(-1) // the full snapshot the deltas build on
			var writeNs int64
			b.ResetTimer()
			for i := range b.N {
				writeNs += write(i).Nanoseconds()
			}
			b.ReportMetric(float64(writeNs)/float64(b.N), "write-ns/op")
		})
	}
}

// newWindowState is the state of q5's window operator on a heap backend of key groups [0, end] of 128:
// the windows' counts and their timers.
func newWindowState(b *testing.B, end int) (KeyedBackend[int64], MapState[benchWindow, int64], Timers) {
	kb, err := NewHeap[int64](Options[int64]{MaxParallelism: 128, KeyGroupEnd: end})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { kb.Close() })
	eb := Engine(kb)
	acc, err := NewMap[benchWindow, int64](eb, "\x00window/acc", codec.MustStruct[benchWindow](), nil)
	if err != nil {
		b.Fatal(err)
	}
	timers, err := NewTimers[int64](eb, "\x00timers/event")
	if err != nil {
		b.Fatal(err)
	}
	return kb, acc, timers
}

// BenchmarkGrowingWindows is q5's window state as its bench job's checkpoints find it: its 10 million
// bids span about a second of event time, so no window fires before the end of the input, and each
// checkpoint finds a fifth more auctions than the last, each with the count of its window slice and the
// slice's timer, while the older auctions' bids have stopped. An op is one such job: from an empty
// backend, a full write every 50,000 new keys up to 300,000, each into a blob of one pool as the task
// writes them. It reports the writer's time of the job (write-ns/op), and apart from it that
// of one more write after every window fired, as at the end of the input (fired-write-ns/op).
func BenchmarkGrowingWindows(b *testing.B) {
	const step, writes = 50_000, 6
	var writeNs, firedNs int64
	for range b.N {
		b.StopTimer()
		kb, acc, timers := newWindowState(b, 127)
		win := benchWindow{Start: 0, End: 10_000}
		pool := checkpoint.NewBlobPool() // as a task's
		next := int64(0)
		for i := range writes {
			for range step {
				kb.SetCurrentKey(next)
				acc.Put(win, next)
				timers.Register(win.End-1, Namespace{A: win.Start, B: win.End})
				next++
			}
			// A few of the older auctions still take bids.
			for k := int64(0); k < next-step; k += 97 {
				kb.SetCurrentKey(k)
				acc.Put(win, k+1)
			}
			ns := timedWrite(b, kb, int64(i+1), pool)
			writeNs += ns
		}
		// The watermark passes every window: each key's count goes (its timer fired).
		if err := timers.FireUpTo(win.End, func(int64, Namespace) error { acc.Clear(); return nil }); err != nil {
			b.Fatal(err)
		}
		ns := timedWrite(b, kb, writes+1, pool)
		firedNs += ns
		kb.Close()
	}
	b.ReportMetric(float64(writeNs)/float64(b.N), "write-ns/op")
	b.ReportMetric(float64(firedNs)/float64(b.N), "fired-write-ns/op")
}

// captureAndWrite captures kb for checkpoint id while the benchmark's timer runs (the task goroutine's
// part), then stops the timer and writes the capture to io.Discard (the writer goroutine's); it returns how
// long the write took.
func captureAndWrite(b *testing.B, kb KeyedBackend[int64], id int64) int64 {
	write, err := kb.Snapshot(id)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	start := time.Now()
	if err := write(io.Discard); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Nanoseconds()
}

// timedWrite captures kb for checkpoint id and writes it into a blob of pool, as the task does; it
// returns how long the write took.
func timedWrite(b *testing.B, kb KeyedBackend[int64], id int64, pool *checkpoint.BlobPool) int64 {
	write, err := kb.Snapshot(id)
	if err != nil {
		b.Fatal(err)
	}
	blob := pool.Blob()
	defer blob.Done()
	start := time.Now()
	if err := write(blob); err != nil {
		b.Fatal(err)
	}
	return time.Since(start).Nanoseconds()
}
