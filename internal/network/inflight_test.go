package network

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
)

// loggable returns a sealed data buffer outside any pool whose payload is n bytes, all tag.
func loggable(seq uint64, n int, tag byte) *Buffer {
	b := &Buffer{data: make([]byte, HeaderSize, HeaderSize+n)}
	b.reset(KindData, seq)
	b.Starts = 1
	b.data = append(b.data, bytes.Repeat([]byte{tag}, n)...)
	b.Seal()
	return b
}

// TestInflightLogRandom drives a log and a model (the list of buffers with their barrier marks) with the
// same seeded adds, truncations and reads from a mark, and checks that every read gives the
// model's buffers after the mark, byte for byte, and that the budget lent is exactly the log's chunks
// (given back when the log empties).
//
// With spill, the memory is two chunks and the rest goes to disk: before each add the spiller's step runs
// (synchronously here) as far as the buffer needs, now and then further; the same must hold, the file
// must hold what the log says it spilled, and it must be emptied.
func TestInflightLogRandom(t *testing.T) {
	for _, spill := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "spilling"}[spill], func(t *testing.T) { testInflightLogRandom(t, spill) })
	}
}

func testInflightLogRandom(t *testing.T, spill bool) {
	for seed := uint64(1); seed <= 10; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		mem := int64(64 << 20)
		if spill {
			mem = 2 * logChunkSize
		}
		budget, err := NewLogBudget(mem)
		if err != nil {
			t.Fatal(err)
		}
		if spill {
			if err := budget.configureSpill(t.TempDir(), 1<<30); err != nil {
				t.Fatal(err)
			}
		}
		l := newInflightLog(budget, &sync.Mutex{})
		type entry struct {
			seq  uint64
			data []byte
		}
		var model []entry
		marks := map[int64]int{} // checkpoint → index in model of the first entry after its barrier
		var order []int64        // marks in id order
		seq, id := uint64(0), int64(0)
		for op := range 3000 {
			switch r := rng.IntN(100); {
			case r < 85:
				size := 1 + rng.IntN(40<<10)
				if rng.IntN(50) == 0 {
					size = logChunkSize + rng.IntN(1000) // larger than a chunk: a chunk of its own
				}
				b := loggable(seq, size, byte(op))
				if spill {
					// The spiller kept up: the buffer finds room. Now and then it spills further.
					target := budget.max - int64(max(len(b.Bytes()), logChunkSize))
					if rng.IntN(5) == 0 {
						target = 0
					}
					budget.spillDown(target, nil)
					budget.truncateFiles()
				}
				barrier := int64(0)
				if rng.IntN(10) == 0 {
					id++
					barrier = id
				}
				l.add(b, barrier)
				model = append(model, entry{seq, bytes.Clone(b.Bytes())})
				seq++
				if barrier != 0 {
					marks[barrier] = len(model)
					order = append(order, barrier)
				}
			case r < 93 && len(order) > 0:
				c := order[rng.IntN(len(order))]
				l.truncate(c)
				at := marks[c]
				model = model[at:]
				var left []int64
				for _, o := range order {
					if o >= c {
						marks[o] -= at
						left = append(left, o)
					} else {
						delete(marks, o)
					}
				}
				order = left
			}
			if len(order) > 0 && op%7 == 0 {
				c := order[rng.IntN(len(order))]
				rd, err := l.readerAt(c)
				if err != nil {
					t.Fatalf("seed %d op %d: %v", seed, op, err)
				}
				for i := marks[c]; ; i++ {
					h, data, ok, err := rd.next()
					if err != nil {
						t.Fatal(err)
					}
					if !ok {
						if i != len(model) {
							t.Fatalf("seed %d op %d: read %d entries from mark %d, want %d", seed, op, i-marks[c], c, len(model)-marks[c])
						}
						break
					}
					if h.FirstSeq != model[i].seq || !bytes.Equal(data, model[i].data) {
						t.Fatalf("seed %d op %d: entry %d from mark %d is seq %d (%d bytes), want seq %d (%d bytes)",
							seed, op, i-marks[c], c, h.FirstSeq, len(data), model[i].seq, len(model[i].data))
					}
				}
			}
			var want int64
			for _, c := range l.chunks {
				if !c.spilled {
					want += int64(cap(c.mem))
				}
			}
			if budget.Used() != want {
				t.Fatalf("seed %d op %d: budget lent %d bytes, the log holds chunks of %d", seed, op, budget.Used(), want)
			}
			var held int64
			for _, e := range model {
				held += int64(len(e.data))
			}
			if l.bytes != held {
				t.Fatalf("seed %d op %d: log counts %d bytes, holds %d", seed, op, l.bytes, held)
			}
			if l.validFrom != 0 {
				t.Fatalf("seed %d op %d: the log dropped what it held (complete from %d)", seed, op, l.validFrom)
			}
			if budget.DiskUsed() != l.fileSize {
				t.Fatalf("seed %d op %d: disk used %d, the file holds %d", seed, op, budget.DiskUsed(), l.fileSize)
			}
		}
		if spill && l.file == nil {
			t.Fatalf("seed %d: nothing was spilled: the test proves nothing", seed)
		}
		if err := l.close(); err != nil {
			t.Fatal(err)
		}
		if budget.Used() != 0 || budget.DiskUsed() != 0 {
			t.Fatalf("seed %d: %d bytes still lent, %d on disk, after the log closed", seed, budget.Used(), budget.DiskUsed())
		}
	}
}

// TestInflightLogSpillBudget: past its disk budget too, a spilling log drops what it holds as one without
// spilling does, and says so to a reader; its file is emptied, and removed when it closes.
func TestInflightLogSpillBudget(t *testing.T) {
	budget, _ := NewLogBudget(logChunkSize)
	dir := t.TempDir()
	if err := budget.configureSpill(dir, 2*logChunkSize); err != nil {
		t.Fatal(err)
	}
	if err := (&LogBudget{}).Spill(dir+"/none", 2*logChunkSize); err == nil {
		t.Fatal("a spill directory that does not exist was taken")
	}
	l := newInflightLog(budget, &sync.Mutex{})
	size := logChunkSize/2 - 64 - HeaderSize
	add := func(i int) {
		budget.spillDown(0, nil) // what the spiller does between two buffers when it keeps up
		l.add(loggable(uint64(i), size, byte(i)), 0)
	}
	for i := range 4 { // two chunks: one spilled, the second in memory
		add(i)
	}
	if l.validFrom != 0 || budget.DiskUsed() == 0 {
		t.Fatalf("within the budgets: complete from %d, %d bytes on disk", l.validFrom, budget.DiskUsed())
	}
	rd, err := l.readerAt(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		h, data, ok, err := rd.next()
		if err != nil || !ok || h.FirstSeq != uint64(i) || data[HeaderSize] != byte(i) || len(data) != HeaderSize+size {
			t.Fatalf("entry %d read back: seq %d, %d bytes, ok %v, err %v", i, h.FirstSeq, len(data), ok, err)
		}
	}
	for i := 4; i < 8; i++ { // two more chunks: past the disk budget
		add(i)
	}
	if l.validFrom == 0 {
		t.Fatal("past the disk budget the log kept everything")
	}
	if _, err := l.readerAt(0); err == nil || !strings.Contains(err.Error(), "past its memory and disk budget") {
		t.Fatalf("a reader from the start of a log that dropped it: %v, want an error that names the budget", err)
	}
	if budget.DiskUsed() != 0 || l.fileSize != 0 {
		t.Fatalf("after the drop: %d bytes on disk", budget.DiskUsed())
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("spill files left after close: %v", left)
	}
}

// TestInflightLogBudget: a log whose budget runs out drops what it holds and the buffer that did not fit,
// never blocks, and is complete again from the next buffer: a reader from a barrier before that is refused,
// saying why; one from a later barrier reads.
func TestInflightLogBudget(t *testing.T) {
	if _, err := NewLogBudget(1000); err == nil {
		t.Fatal("a budget below one chunk was made")
	}
	budget, _ := NewLogBudget(2 * logChunkSize)
	l := newInflightLog(budget, &sync.Mutex{})
	l.add(loggable(0, 100, 1), 1)
	for i := range 5 {
		l.add(loggable(uint64(1+i), logChunkSize/2-64-HeaderSize, 2), 0) // two a chunk: the fifth needs a third
	}
	if _, err := l.readerAt(1); err == nil || !strings.Contains(err.Error(), "no barrier of checkpoint 1: the log dropped what it held before entry 6, past its memory and disk budget") {
		t.Fatalf("reader from a barrier dropped for the budget: %v, want an error that names the budget", err)
	}
	if l.validFrom != 6 || len(l.entries) != 0 || budget.Used() != 0 {
		t.Fatalf("after the budget ran out: valid from %d, %d entries, %d bytes lent", l.validFrom, len(l.entries), budget.Used())
	}
	l.add(loggable(6, 100, 3), 2)
	l.add(loggable(7, 100, 4), 0)
	rd, err := l.readerAt(2)
	if err != nil {
		t.Fatal(err)
	}
	h, data, ok, err := rd.next()
	if err != nil || !ok || h.FirstSeq != 7 || data[HeaderSize] != 4 || binary.LittleEndian.Uint64(data[12:]) != 7 {
		t.Fatalf("first entry after barrier 2: seq %d ok %v err %v", h.FirstSeq, ok, err)
	}
}

// TestInflightLogAllocations: a log truncated at every checkpoint reuses its chunks: adding buffers
// allocates nothing in steady state beyond the entry list's growth, which truncation keeps bounded.
func TestInflightLogAllocations(t *testing.T) {
	budget, _ := NewLogBudget(64 << 20)
	l := newInflightLog(budget, &sync.Mutex{})
	b := loggable(0, 32<<10-HeaderSize, 7)
	id := int64(0)
	round := func() {
		for range 200 {
			l.add(b, 0)
		}
		id++
		l.add(b, id)
		l.truncate(id - 1)
	}
	for range 10 {
		round()
	}
	if allocs := testing.AllocsPerRun(20, round); allocs > 1 {
		t.Fatalf("%v allocations per round of 201 logged buffers", allocs)
	}
}

// TestInflightLogTruncatedBarrier: a reader from a barrier that a truncation dropped, in a log that never
// went past its budget, is refused with an error that says which barriers the log holds and that the
// budget was not the cause (a fallback's reason quotes it).
func TestInflightLogTruncatedBarrier(t *testing.T) {
	budget, _ := NewLogBudget(4 * logChunkSize)
	l := newInflightLog(budget, &sync.Mutex{})
	for i := range 6 {
		l.add(loggable(uint64(i), 100, byte(i)), int64((i+1)/2*(i%2))) // barriers of checkpoints 1, 2, 3 at 1, 3, 5
	}
	l.truncate(2)
	_, err := l.readerAt(1)
	if err == nil || !strings.Contains(err.Error(), "no barrier of checkpoint 1: it holds the barriers of checkpoints [2 3]") ||
		!strings.Contains(err.Error(), "dropped nothing for its budget") {
		t.Fatalf("reader from a truncated barrier: %v, want an error that names the barriers held and clears the budget", err)
	}
}
