package network

import (
	"bytes"
	"errors"
	"os"
	"sync"
	"testing"
	"time"
)

// lockedLog is a log with its lock, driven as a subpartition drives it while the spiller runs.
type lockedLog struct {
	mu sync.Mutex
	l  *inflightLog
}

func (g *lockedLog) do(f func(l *inflightLog)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g.l)
}

// readAll reads the log from the barrier of checkpoint id and checks it holds buffers from seq on, one per
// entry, each of n payload bytes of tag byte(seq).
func (g *lockedLog) readAll(t *testing.T, id int64, seq uint64, n int) int {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	rd, err := g.l.readerAt(id)
	if err != nil {
		t.Fatalf("reader from checkpoint %d: %v", id, err)
	}
	read := 0
	for ; ; seq++ {
		h, data, ok, err := rd.next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return read
		}
		if h.FirstSeq != seq || len(data) != HeaderSize+n || !bytes.Equal(data[HeaderSize:], bytes.Repeat([]byte{byte(seq)}, n)) {
			t.Fatalf("entry %d read back: seq %d, %d bytes, want seq %d, %d bytes of %d", read, h.FirstSeq, len(data), seq, HeaderSize+n, byte(seq))
		}
		read++
	}
}

// TestLogSpillerKeepsUp: with the spiller goroutine running, a log given 48 MiB through a 4 MiB budget —
// the producer slowed only by the test, which waits while more than the high mark is lent, as a producer
// slower than the disk would be — stays complete: everything is read back from the first barrier, from
// memory and from disk, checkpoints' truncations empty the file, and Close of the budget ends the spiller.
func TestLogSpillerKeepsUp(t *testing.T) {
	budget, err := NewLogBudget(4 * logChunkSize)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := budget.Spill(dir, 1<<30); err != nil {
		t.Fatal(err)
	}
	defer budget.Close()
	g := &lockedLog{}
	g.l = newInflightLog(budget, &g.mu)
	const n = 16<<10 - HeaderSize
	const total = 48 * logChunkSize / (16 << 10)
	for i := range total {
		deadline := time.Now().Add(10 * time.Second)
		for budget.Used() > budget.high {
			if time.Now().After(deadline) {
				t.Fatalf("buffer %d: the spiller left %d bytes lent for 10 s (high mark %d)", i, budget.Used(), budget.high)
			}
			time.Sleep(100 * time.Microsecond)
		}
		barrier := int64(0)
		if i == 10 {
			barrier = 1
		}
		g.do(func(l *inflightLog) { l.add(loggable(uint64(i), n, byte(i)), barrier) })
	}
	g.do(func(l *inflightLog) {
		if l.validFrom != 0 {
			t.Fatalf("the log dropped what it held (complete from %d) with a spiller that kept up", l.validFrom)
		}
	})
	if st := budget.Stats(); st.BytesSpilled < 40*logChunkSize || st.Drops != 0 || st.SpillErrors != 0 {
		t.Fatalf("spilled %d bytes, %d drops, %d errors: want most of 48 MiB spilled, nothing dropped", st.BytesSpilled, st.Drops, st.SpillErrors)
	}
	if got := g.readAll(t, 1, 11, n); got != total-11 {
		t.Fatalf("read %d buffers from the barrier, want %d", got, total-11)
	}
	// A checkpoint after everything: the log empties, its file's account with it, and the spiller
	// truncates the file. The account empties at once, or when a write in flight then ends.
	g.do(func(l *inflightLog) {
		l.add(loggable(total, 10, 0), 2)
		l.truncate(2)
	})
	waitFor(t, "the disk given back", func() bool { return budget.DiskUsed() == 0 })
	waitFor(t, "the spill file truncated", func() bool {
		fs, _ := os.ReadDir(dir)
		if len(fs) != 1 {
			return false
		}
		fi, err := fs[0].Info()
		return err == nil && fi.Size() == 0
	})
	g.do(func(l *inflightLog) {
		if err := l.close(); err != nil {
			t.Fatal(err)
		}
	})
	budget.Close()
	budget.Close() // idempotent
	select {
	case <-budget.done:
	default:
		t.Fatal("the spiller still runs after Close")
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 || budget.Used() != 0 {
		t.Fatalf("after close: files %v, %d bytes lent", left, budget.Used())
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLogSpillerWriteInFlight: the spiller's write is held up (a disk that stalls), and what the log does
// meanwhile to the chunk being written — nothing, run out of memory, drop it by a checkpoint's truncation,
// close — takes effect when the write ends: the producer
// never waits for it, the memory goes back, the disk is accounted for, the log reads back what it kept,
// and a closed log's file is removed.
func TestLogSpillerWriteInFlight(t *testing.T) {
	const n = 64<<10 - HeaderSize
	cases := []struct {
		name string
		// meanwhile runs while the write is held up, on a log of one buffer before checkpoint 1's barrier
		// and `last` after it (seq 0..last), the oldest chunk being written.
		meanwhile func(t *testing.T, g *lockedLog, last int)
		// after checks the log once the write ended.
		after func(t *testing.T, g *lockedLog, b *LogBudget, last int)
	}{
		{"spilled", func(*testing.T, *lockedLog, int) {},
			func(t *testing.T, g *lockedLog, b *LogBudget, last int) {
				g.do(func(l *inflightLog) {
					if !l.chunks[0].spilled || b.DiskUsed() == 0 {
						t.Fatalf("the chunk written is not spilled (%d bytes on disk)", b.DiskUsed())
					}
				})
				if got := g.readAll(t, 1, 1, n); got != last {
					t.Fatalf("read %d buffers from the barrier, want %d", got, last)
				}
			}},
		{"memory runs out", func(t *testing.T, g *lockedLog, last int) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				for j := last + 1; j < last+100; j++ {
					g.do(func(l *inflightLog) { l.add(loggable(uint64(j), n, byte(j)), 0) })
				}
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the producer waited for the spiller's write") // the deferred Close waits too: the test times out
			}
			if g.l.budget.Stats().Drops == 0 {
				t.Fatal("the memory never ran out with the write held up")
			}
			g.do(func(l *inflightLog) {
				if _, err := l.readerAt(1); err == nil {
					t.Fatal("a reader from a barrier the log dropped")
				}
			})
		}, func(t *testing.T, g *lockedLog, b *LogBudget, last int) {
			// The dropped chunk's memory came back; the disk holds what the log's file does (chunks
			// spilled since, if any).
			g.do(func(l *inflightLog) {
				var mem int64
				for _, c := range l.chunks {
					if !c.spilled {
						mem += int64(cap(c.mem))
					}
				}
				if b.Used() != mem || b.DiskUsed() != l.fileSize {
					t.Fatalf("%d bytes lent for chunks of %d, %d on disk for a file of %d", b.Used(), mem, b.DiskUsed(), l.fileSize)
				}
			})
		}},
		{"truncated", func(t *testing.T, g *lockedLog, last int) {
			g.do(func(l *inflightLog) {
				l.add(loggable(uint64(last+1), 10, 0), 9)
				l.truncate(9)
			})
		}, func(t *testing.T, g *lockedLog, b *LogBudget, last int) {
			if b.DiskUsed() != 0 || b.Used() != 0 {
				t.Fatalf("after the log emptied: %d bytes on disk, %d lent", b.DiskUsed(), b.Used())
			}
		}},
		{"closed", func(t *testing.T, g *lockedLog, last int) {
			g.do(func(l *inflightLog) {
				if err := l.close(); err != nil {
					t.Fatal(err)
				}
			})
		}, func(t *testing.T, g *lockedLog, b *LogBudget, last int) {
			if b.Used() != 0 || b.DiskUsed() != 0 || b.Stats().Logs != 0 {
				t.Fatalf("after close: %d bytes lent, %d on disk, %d logs", b.Used(), b.DiskUsed(), b.Stats().Logs)
			}
			if left, _ := os.ReadDir(b.dir); len(left) != 0 {
				t.Fatalf("spill files left: %v", left)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			budget, _ := NewLogBudget(2 * logChunkSize)
			started, gate := make(chan struct{}, 1), make(chan struct{})
			var once sync.Once
			open := func() { once.Do(func() { close(gate) }) }
			budget.writeAt = func(f *os.File, p []byte, off int64) (int, error) {
				select {
				case started <- struct{}{}:
				default:
				}
				<-gate
				return f.WriteAt(p, off)
			}
			if err := budget.Spill(t.TempDir(), 1<<30); err != nil {
				t.Fatal(err)
			}
			defer budget.Close()
			defer open()
			g := &lockedLog{}
			g.l = newInflightLog(budget, &g.mu)
			g.do(func(l *inflightLog) { l.add(loggable(0, n, 0), 1) })
			// Past the high mark (1.5 MiB) the spiller wakes and takes the oldest chunk.
			last := 1
			for ; ; last++ {
				g.do(func(l *inflightLog) { l.add(loggable(uint64(last), n, byte(last)), 0) })
				if len(started) > 0 {
					break
				}
				if last == 1000 {
					t.Fatal("the spiller did not start a write past the high mark")
				}
				if budget.Used() > budget.high {
					time.Sleep(time.Millisecond) // let it run
				}
			}
			tc.meanwhile(t, g, last)
			open()
			budget.Close() // the write ends, and the spiller with it: what follows sees a log at rest
			g.do(func(l *inflightLog) {
				if l.writing != nil {
					t.Fatal("a write in flight after the spiller stopped")
				}
			})
			tc.after(t, g, budget, last)
			g.do(func(l *inflightLog) {
				if err := l.close(); err != nil {
					t.Fatal(err)
				}
			})
			if budget.Used() != 0 || budget.DiskUsed() != 0 {
				t.Fatalf("after everything closed: %d bytes lent, %d on disk", budget.Used(), budget.DiskUsed())
			}
		})
	}
}

// TestLogSpillerWriteFails: a write that fails leaves its chunk in memory, readable, and the log spills no
// more (the error is counted); the memory then runs out and the log drops what it held, as without
// spilling.
func TestLogSpillerWriteFails(t *testing.T) {
	budget, _ := NewLogBudget(2 * logChunkSize)
	budget.writeAt = func(*os.File, []byte, int64) (int, error) { return 0, errors.New("disk on fire") }
	if err := budget.configureSpill(t.TempDir(), 1<<30); err != nil {
		t.Fatal(err)
	}
	g := &lockedLog{}
	g.l = newInflightLog(budget, &g.mu)
	const n = 256<<10 - HeaderSize
	for i := range 6 { // six quarter chunks: two chunks' worth, within the budget
		g.do(func(l *inflightLog) { l.add(loggable(uint64(i), n, byte(i)), 0) })
	}
	budget.spillDown(0, nil)
	if st := budget.Stats(); st.SpillErrors != 1 || st.BytesSpilled != 0 || !g.l.broken.Load() || budget.DiskUsed() != 0 {
		t.Fatalf("after a failed write: %+v, broken %v, %d on disk", st, g.l.broken.Load(), budget.DiskUsed())
	}
	if got := g.readAll(t, 0, 0, n); got != 6 {
		t.Fatalf("read %d buffers back after the failed write, want 6", got)
	}
	budget.spillDown(0, nil) // a broken log is not chosen again
	if st := budget.Stats(); st.SpillErrors != 1 {
		t.Fatalf("%d write errors: the broken log was written to again", st.SpillErrors)
	}
	for i := 6; i < 12; i++ {
		g.do(func(l *inflightLog) { l.add(loggable(uint64(i), n, byte(i)), 0) })
	}
	if budget.Stats().Drops == 0 {
		t.Fatal("the memory of a log that cannot spill never ran out")
	}
	g.do(func(l *inflightLog) {
		if err := l.close(); err != nil {
			t.Fatal(err)
		}
	})
	if budget.Used() != 0 {
		t.Fatalf("%d bytes lent after close", budget.Used())
	}
}
