package network

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/ident"
)

// blockingPartition makes and registers a blocking partition spilling into a fresh directory.
func (e *testEnv) blockingPartition(result ident.ResultID, bufSize, nbuf, subs int) (*ResultPartition, *BufferPool, string) {
	e.t.Helper()
	dir := e.t.TempDir()
	p, pool := e.partition(result, bufSize, nbuf, PartitionOptions{Subpartitions: subs, Blocking: true, SpillDir: dir})
	return p, pool, dir
}

// openSub opens a reader of subpartition sub for the given consumer attempt.
func openSub(t *testing.T, env *testEnv, pid ident.PartitionID, sub int, attempt int32, credits, bufSize int) (*reader, error) {
	r := newReader(t)
	owner := testConsumer
	owner.Index = int32(sub)
	owner.Number = attempt
	ch, err := env.open(pid, sub, owner, credits, bufSize, r.notify)
	if err != nil {
		return nil, err
	}
	r.ch = ch
	return r, nil
}

// produceFinished writes records of the given sizes into subpartition 0 and finishes, without any consumer
// attached: a blocking producer must not wait for one.
func produceFinished(t *testing.T, p *ResultPartition, sizes []int) {
	t.Helper()
	wait(t, produce(p, sizes, true))
	p.Close()
}

// readRecords consumes buffers until the reader holds at least n records; unlike readUntil it stops as soon
// as it has them, even if the channel has more ready.
func readRecords(r *reader, n int) error {
	deadline := time.NewTimer(testWait)
	defer deadline.Stop()
	for len(r.got) < n {
		b, err := r.ch.Poll()
		if err != nil {
			return err
		}
		if b != nil {
			if err := r.handle(b); err != nil {
				return err
			}
			continue
		}
		select {
		case <-r.wake:
		case <-deadline.C:
			return fmt.Errorf("timed out with %d of %d records", len(r.got), n)
		}
	}
	return nil
}

// dirEntries lists the names in dir.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func sizesOf(n, mod int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = (i * 7) % mod
	}
	return s
}

func TestBlockingRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		bufSize int
		nbuf    int // producer pool
		credits int
		sizes   []int
	}{
		{"tiny records", 64, 1, 2, []int{0, 1, 2, 3, 4, 5}},
		{"prefix split", HeaderSize + 46, 1, 1, []int{40, 1, 0, 17}},
		{"spans 1,2,3 buffers", 64, 2, 3, []int{30, 80, 130, 5, 200, 1, 100}},
		{"many small buffers", MinBufferSize, 1, 2, sizesOf(300, 37)},
		{"large", 4096, 2, 4, []int{100000, 3, 50000}},
		{"credit above the view's pool", 64, 1, 64, sizesOf(500, 90)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, pool, dir := env.blockingPartition(1, tc.bufSize, tc.nbuf, 1)
				produceFinished(t, p, tc.sizes)
				if pool.Available() != pool.Limit() {
					t.Fatalf("finished blocking producer holds buffers: %d of %d available", pool.Available(), pool.Limit())
				}
				pool.Destroy() // the producer task is gone; its partition stays readable
				if !p.Consumable() {
					t.Fatal("finished blocking partition is not consumable")
				}
				if files := p.SpillFiles(); len(files) != 1 || filepath.Dir(files[0]) != dir {
					t.Fatalf("spill files %v, want one in %s", files, dir)
				}
				r, err := openReader(t, env, p.ID(), 0, tc.credits, tc.bufSize)
				if err != nil {
					t.Fatal(err)
				}
				if err := r.readToEnd(); err != nil {
					t.Fatal(err)
				}
				checkRecords(t, r.got, tc.sizes)
				if b, err := r.ch.Poll(); b != nil || err != nil {
					t.Fatalf("poll after end of partition: %v, %v", b, err)
				}
				r.ch.Release()
				env.waitIdle()
				if env.pm.Len() != 1 {
					t.Fatal("a consumed blocking partition was released: it must stay for re-reads")
				}
				if st := p.Stats(); st.ViewsCreated != 1 || st.BuffersAdded == 0 || st.BuffersDropped != 0 {
					t.Fatalf("stats %+v", st)
				}
			})
		})
	}
}

func TestBlockingConsumableOnlyAfterFinish(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		p, _, _ := env.blockingPartition(1, 64, 2, 1)
		sizes := sizesOf(50, 70)
		for i, n := range sizes[:25] {
			if err := p.EmitRecord(0, record(i, n)); err != nil {
				t.Fatal(err)
			}
		}
		// Before Finish: refused with ErrPartitionNotReady, which is also ErrPartitionNotFound.
		if env.srv == nil {
			_, err := openReader(t, env, p.ID(), 0, 2, 64)
			if !errors.Is(err, ErrPartitionNotReady) || !errors.Is(err, ErrPartitionNotFound) || !strings.Contains(err.Error(), p.ID().String()) {
				t.Fatalf("got %v, want ErrPartitionNotReady wrapping ErrPartitionNotFound", err)
			}
		} else {
			pool := NewBufferPool("consumer", 64, 1)
			opts := env.dialOptions(p.ID(), 0, testConsumer)
			opts.Timeout = 50 * time.Millisecond
			if opts.TLS != nil {
				opts.Timeout = time.Second // a TLS handshake under -race on a loaded machine takes tens of ms
			}
			_, err := DialRemoteChannel(context.Background(), env.srv.Addr(), p.ID(), 0, testConsumer, pool, 1, nil, opts)
			if !errors.Is(err, ErrPartitionNotReady) || !errors.Is(err, ErrPartitionNotFound) || !strings.Contains(err.Error(), "gave up after") {
				t.Fatalf("got %v, want a retried ErrPartitionNotReady", err)
			}
		}
		// A consumer that keeps asking (as a task does) gets in once the producer finished.
		type result struct {
			r   *reader
			err error
		}
		opened := make(chan result, 1)
		go func() {
			for {
				r, err := openReader(t, env, p.ID(), 1, 2, 64)
				if errors.Is(err, ErrPartitionNotFound) && env.srv == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				opened <- result{r, err}
				return
			}
		}()
		time.Sleep(20 * time.Millisecond)
		select {
		case res := <-opened:
			t.Fatalf("attached before Finish: %v", res.err)
		default:
		}
		for i, n := range sizes[25:] {
			if err := p.EmitRecord(0, record(25+i, n)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Finish(); err != nil {
			t.Fatal(err)
		}
		p.Close()
		var res result
		select {
		case res = <-opened:
		case <-time.After(testWait):
			t.Fatal("consumer did not attach after Finish")
		}
		if res.err != nil {
			t.Fatal(res.err)
		}
		if err := res.r.readToEnd(); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, res.r.got, sizes)
	})
}

// TestBlockingNotConsumableUntilEverySubpartitionEnded: a partition is consumable only when all of its
// subpartitions are on disk, not subpartition by subpartition.
func TestBlockingNotConsumableUntilEverySubpartitionEnded(t *testing.T) {
	env := newTestEnv(t, false)
	p, _, _ := env.blockingPartition(1, 64, 2, 2)
	if err := p.AddEvent(0, Event{Type: EventEndOfPartition}); err != nil {
		t.Fatal(err)
	}
	if _, err := openSub(t, env, p.ID(), 0, 0, 1, 64); !errors.Is(err, ErrPartitionNotReady) {
		t.Fatalf("got %v, want ErrPartitionNotReady", err)
	}
	if err := p.AddEvent(1, Event{Type: EventEndOfPartition}); err != nil {
		t.Fatal(err)
	}
	for sub := 0; sub < 2; sub++ {
		r, err := openSub(t, env, p.ID(), sub, 0, 1, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.readToEnd(); err != nil || len(r.got) != 0 {
			t.Fatalf("subpartition %d: %d records, %v", sub, len(r.got), err)
		}
	}
	if err := p.EmitRecord(0, record(0, 10)); err != nil {
		t.Fatal(err) // buffered in the current buffer, written only when sealed
	}
	if err := p.Finish(); err == nil || !strings.Contains(err.Error(), "after end of partition") {
		t.Fatalf("writing after end of partition: %v", err)
	}
	p.Close()
}

func TestBlockingReread(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize = 64
		p, _, _ := env.blockingPartition(1, bufSize, 2, 1)
		sizes := sizesOf(400, 150)
		produceFinished(t, p, sizes)

		// Attempts 0 and 1 each read the whole partition from the start.
		var reads [][][]byte
		for attempt := int32(0); attempt < 2; attempt++ {
			r, err := openReader(t, env, p.ID(), attempt, 2, bufSize)
			if err != nil {
				t.Fatalf("attempt %d: %v", attempt, err)
			}
			if err := r.readToEnd(); err != nil {
				t.Fatalf("attempt %d: %v", attempt, err)
			}
			checkRecords(t, r.got, sizes)
			if r.dec.PartialRecordsSkipped != 0 {
				t.Fatalf("attempt %d skipped %d partial records", attempt, r.dec.PartialRecordsSkipped)
			}
			reads = append(reads, r.got)
			r.ch.Release()
		}
		for i := range reads[0] {
			if !bytes.Equal(reads[0][i], reads[1][i]) {
				t.Fatalf("record %d differs between attempts", i)
			}
		}

		// Attempt 2 is replaced in the middle of its read by attempt 3, which starts from the beginning.
		mid, err := openReader(t, env, p.ID(), 2, 1, bufSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := readRecords(mid, 50); err != nil {
			t.Fatal(err)
		}
		last, err := openReader(t, env, p.ID(), 3, 2, bufSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := mid.pollError(); !errors.Is(err, ErrViewReleased) {
			t.Fatalf("replaced attempt: got %v, want ErrViewReleased", err)
		}
		if len(mid.got) >= len(sizes) {
			t.Fatal("replaced attempt read everything")
		}
		if err := last.readToEnd(); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, last.got, sizes)

		// Older attempts, and the current one again, are fenced.
		for _, attempt := range []int32{1, 2, 3} {
			if _, err := openReader(t, env, p.ID(), attempt, 1, bufSize); !errors.Is(err, ErrStaleAttempt) {
				t.Fatalf("attempt %d: got %v, want ErrStaleAttempt", attempt, err)
			}
		}
		if st := p.Stats(); st.ViewsCreated != 4 {
			t.Fatalf("views created: %d, want 4", st.ViewsCreated)
		}
	})
}

func TestBlockingReleaseDeletesSpillFiles(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const subs = 3
		release := []struct {
			name string
			do   func(p *ResultPartition)
		}{
			{"Release", func(p *ResultPartition) { env.pm.Release(p.ID()) }},
			{"ReleaseProducedBy", func(p *ResultPartition) { env.pm.ReleaseProducedBy(p.ID().Producer) }},
			{"ReleaseAll", func(*ResultPartition) { env.pm.ReleaseAll() }},
		}
		for i, rel := range release {
			dir := t.TempDir()
			pid := testPID
			pid.Result = ident.ResultID(10 + i)
			pid.Producer.Index = int32(i) // distinct producers, so that ReleaseProducedBy takes only this one
			pool := NewBufferPool("producer", 64, subs)
			p, err := NewResultPartition(pid, PartitionOptions{Subpartitions: subs, Blocking: true, SpillDir: dir}, pool, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := env.pm.Register(p); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < 300; j++ {
				if err := p.EmitRecord(j%subs, record(j/subs, 20)); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Finish(); err != nil {
				t.Fatal(err)
			}
			p.Close()
			if n := len(dirEntries(t, dir)); n != subs {
				t.Fatalf("%s: %d spill files, want %d", rel.name, n, subs)
			}
			// A reader in the middle of subpartition 1 when the partition goes.
			r, err := openSub(t, env, pid, 1, 0, 1, 64)
			if err != nil {
				t.Fatal(err)
			}
			if err := readRecords(r, 5); err != nil {
				t.Fatal(err)
			}
			rel.do(p)
			if names := dirEntries(t, dir); len(names) != 0 {
				t.Fatalf("%s: spill files left: %v", rel.name, names)
			}
			if err := r.pollError(); !errors.Is(err, ErrPartitionReleased) {
				t.Fatalf("%s: reader got %v, want ErrPartitionReleased", rel.name, err)
			}
			if _, err := env.pm.CreateView(pid, 0, testConsumer, 1, func() {}); !errors.Is(err, ErrPartitionNotFound) || errors.Is(err, ErrPartitionNotReady) {
				t.Fatalf("%s: after release: %v, want ErrPartitionNotFound", rel.name, err)
			}
		}
		// A partition released before its producer finished: its files go too, and the producer is not
		// disturbed by writing into a released partition.
		dir := t.TempDir()
		p, _ := env.partition(20, 64, 1, PartitionOptions{Blocking: true, SpillDir: dir})
		wait(t, produce(p, sizesOf(100, 50), false))
		if len(dirEntries(t, dir)) != 1 {
			t.Fatal("no spill file while producing")
		}
		env.pm.Release(p.ID())
		wait(t, produce(p, sizesOf(100, 50), true))
		p.Close()
		if names := dirEntries(t, dir); len(names) != 0 {
			t.Fatalf("spill files left: %v", names)
		}
	})
}

// TestBlockingProducerNeverBlocks: a producer whose pool holds one buffer per subpartition writes far more
// than its pool holds with no consumer attached, then every subpartition reads back intact.
func TestBlockingProducerNeverBlocks(t *testing.T) {
	env := newTestEnv(t, false)
	const subs, records = 4, 20000
	cancel := make(chan struct{}) // never closed: a blocked Request would hang until the timeout below
	dir := t.TempDir()
	pool := NewBufferPool("tiny", 64, subs)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: subs, Blocking: true, SpillDir: dir}, pool, cancel)
	if err != nil {
		t.Fatal(err)
	}
	if err := env.pm.Register(p); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < records; i++ {
			if err := p.EmitRecord(i%subs, record(i/subs, 30)); err != nil {
				done <- err
				return
			}
		}
		done <- p.Finish()
	}()
	wait(t, done)
	p.Close()
	if pool.Available() != pool.Limit() {
		t.Fatalf("%d of %d producer buffers available after Finish", pool.Available(), pool.Limit())
	}
	var spilled int64
	for _, f := range p.SpillFiles() {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		spilled += fi.Size()
	}
	if held := int64(pool.Limit() * pool.Size()); spilled < 100*held {
		t.Fatalf("spilled %d bytes, want far more than the pool's %d", spilled, held)
	}
	if st := p.Stats(); st.BytesSpilled != uint64(spilled) {
		t.Fatalf("stats say %d bytes spilled, the files hold %d", st.BytesSpilled, spilled)
	}
	want := make([]int, records/subs)
	for i := range want {
		want[i] = 30
	}
	for sub := 0; sub < subs; sub++ {
		r, err := openSub(t, env, p.ID(), sub, 0, 2, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.readToEnd(); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, r.got, want)
	}
	env.pm.ReleaseAll()
}

// spillFrames returns the offsets of the frames of a spill file.
func spillFrames(t *testing.T, data []byte) []int {
	t.Helper()
	var offs []int
	for off := 0; off < len(data); {
		offs = append(offs, off)
		off += spillFrameHeaderSize + int(binary.LittleEndian.Uint32(data[off:]))
	}
	return offs
}

func TestBlockingCorruptSpillFile(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(t *testing.T, path string, data []byte, frames []int)
		wantErr error
		want    string
	}{
		{"cut inside a buffer", func(t *testing.T, path string, data []byte, frames []int) {
			truncate(t, path, frames[2]+spillFrameHeaderSize+10)
		}, ErrCorrupt, "file ends inside the buffer"},
		{"cut inside a length", func(t *testing.T, path string, data []byte, frames []int) {
			truncate(t, path, frames[2]+2)
		}, ErrCorrupt, "file ends inside the length of a buffer"},
		{"end of partition missing", func(t *testing.T, path string, data []byte, frames []int) {
			truncate(t, path, frames[len(frames)-1])
		}, ErrCorrupt, "file ends without end of partition"},
		{"bad header", func(t *testing.T, path string, data []byte, frames []int) {
			data[frames[2]+spillFrameHeaderSize+1] = 0xff
			rewrite(t, path, data)
		}, ErrCorrupt, "checksum mismatch"},
		{"flipped bit in a record", func(t *testing.T, path string, data []byte, frames []int) {
			data[frames[3]-3] ^= 0x10 // the end of buffer 2, inside a record
			rewrite(t, path, data)
		}, ErrCorrupt, "buffer 2 at offset 144: checksum mismatch"},
		{"bad header under a good checksum", func(t *testing.T, path string, data []byte, frames []int) {
			at := frames[2] + spillFrameHeaderSize
			n := int(binary.LittleEndian.Uint32(data[frames[2]:]))
			data[at+1] = 0xff
			binary.LittleEndian.PutUint32(data[frames[2]+4:], crc32.Checksum(data[at:at+n], spillCRC))
			rewrite(t, path, data)
		}, ErrCorrupt, "reserved header bytes are not zero"},
		{"impossible length", func(t *testing.T, path string, data []byte, frames []int) {
			binary.LittleEndian.PutUint32(data[frames[2]:], 1<<30)
			rewrite(t, path, data)
		}, ErrCorrupt, "buffer length 1073741824, want 20 to 64"},
		{"trailing bytes", func(t *testing.T, path string, data []byte, frames []int) {
			rewrite(t, path, append(data, 1, 2, 3))
		}, ErrCorrupt, "bytes after end of partition"},
		{"deleted", func(t *testing.T, path string, data []byte, frames []int) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, nil, "no such file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forEachTransport(t, func(t *testing.T, env *testEnv) {
				p, _, _ := env.blockingPartition(1, 64, 1, 1)
				sizes := sizesOf(100, 60)
				produceFinished(t, p, sizes)
				path := p.SpillFiles()[0]
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				tc.damage(t, path, data, spillFrames(t, data))
				r, err := openReader(t, env, p.ID(), 0, 2, 64)
				if err != nil {
					t.Fatal(err)
				}
				err = r.pollError()
				if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
				for _, want := range []string{tc.want, path} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("error %q does not contain %q", err, want)
					}
				}
				if env.srv == nil {
					if _, again := r.ch.Poll(); again == nil {
						t.Fatal("a failed view polled without error afterwards")
					}
				}
			})
		})
	}
}

func truncate(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.Truncate(path, int64(n)); err != nil {
		t.Fatal(err)
	}
}

func rewrite(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestBlockingSpillWriteErrors(t *testing.T) {
	t.Run("cannot create the file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spill")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Blocking: true, SpillDir: dir}, NewBufferPool("p", 64, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		var emitErr error
		for i := 0; i < 10 && emitErr == nil; i++ {
			emitErr = p.EmitRecord(0, record(i, 40))
		}
		if emitErr == nil || !strings.Contains(emitErr.Error(), dir) || !strings.Contains(emitErr.Error(), "create spill file") {
			t.Fatalf("got %v, want an error naming %s", emitErr, dir)
		}
		if err := p.Finish(); err == nil || err.Error() != emitErr.Error() {
			t.Fatalf("finish after a spill error: %v", err)
		}
		if p.Consumable() {
			t.Fatal("a partition that failed to spill is consumable")
		}
		p.Close()
		p.Release()
	})
	t.Run("write fails", func(t *testing.T) {
		p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Blocking: true, SpillDir: t.TempDir()}, NewBufferPool("p", 64, 1), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.EmitRecord(0, record(0, 100)); err != nil { // seals two buffers: the file exists
			t.Fatal(err)
		}
		path := p.SpillFiles()[0]
		s := p.Subpartition(0)
		s.mu.Lock()
		_ = s.spill.f.Close() // the disk goes away under the producer
		s.mu.Unlock()
		var emitErr error
		for i := 1; i < 10000 && emitErr == nil; i++ {
			emitErr = p.EmitRecord(0, record(i, 40))
		}
		if emitErr == nil || !strings.Contains(emitErr.Error(), path) || !strings.Contains(emitErr.Error(), "write spill file") {
			t.Fatalf("got %v, want a write error naming %s", emitErr, path)
		}
		if err := p.Finish(); err == nil {
			t.Fatal("finish after a write error succeeded")
		}
		p.Close()
		p.Release()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("spill file left after release: %v", err)
		}
	})
}

func TestBlockingOptions(t *testing.T) {
	pool := NewBufferPool("p", 64, 1)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts PartitionOptions
		want string
	}{
		{"blocking and reconnectable", PartitionOptions{Blocking: true, Reconnectable: true}, "mutually exclusive"},
		{"missing spill dir", PartitionOptions{Blocking: true, SpillDir: filepath.Join(file, "x")}, "PartitionOptions.SpillDir"},
		{"spill dir is a file", PartitionOptions{Blocking: true, SpillDir: file}, "is not a directory"},
	} {
		tc.opts.Subpartitions = 1
		if _, err := NewResultPartition(testPID, tc.opts, pool, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Blocking: true}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.opts.SpillDir != os.TempDir() || !p.Blocking() || p.Consumable() {
		t.Fatalf("defaults: %+v, consumable %v", p.opts, p.Consumable())
	}
	p.Release()
}

// TestBlockingViewPoolRefill: a view whose pool is empty while it still has credit (the consumer holds all
// its buffers) wakes the consumer once a buffer comes back.
func TestBlockingViewPoolRefill(t *testing.T) {
	pool := NewBufferPool("p", 64, 1)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Blocking: true, SpillDir: t.TempDir()}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	for i := 0; i < 10; i++ {
		if err := p.EmitRecord(0, record(i, 40)); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Finish(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	woken := 0
	v, err := p.CreateView(0, testConsumer, 0, func() { woken++ })
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	if b, err := v.Poll(); b != nil || err != nil || v.HasData() {
		t.Fatalf("poll without credit: %v, %v", b, err)
	}
	v.AddCredit(5) // more credit than the view's pool of one buffer
	if woken != 1 || !v.HasData() {
		t.Fatalf("woken %d times after credit", woken)
	}
	b, err := v.Poll()
	if b == nil || err != nil {
		t.Fatalf("poll with credit: %v, %v", b, err)
	}
	if b2, err := v.Poll(); b2 != nil || err != nil || v.HasData() {
		t.Fatalf("poll with an empty view pool: %v, %v", b2, err)
	}
	b.Recycle()
	v.AddCredit(1)
	if woken != 2 {
		t.Fatalf("not woken when the view's pool was refilled (woken %d)", woken)
	}
	n := 1
	for {
		b, err := v.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			break
		}
		n++
		b.Recycle()
		v.AddCredit(1)
	}
	if n != 11 || v.HasData() {
		t.Fatalf("read %d buffers, want 10 data and end of partition", n)
	}
}

// BenchmarkBlockingEmitRead writes b.N records through blocking partitions to disk and reads them back
// through a local channel and a RecordDecoder. Each partition takes at most 64 MiB, so that the disk space
// used stays bounded however large b.N gets.
func BenchmarkBlockingEmitRead(b *testing.B) {
	for _, size := range []int{16, 100, 1000} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			dir := b.TempDir()
			pool := NewBufferPool("bench", DefaultBufferSize, 2)
			rec := record(1, size)
			d := NewRecordDecoder(0)
			perPartition := (64 << 20) / (size + lengthPrefixSize)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(b.N-done, perPartition)
				if got := blockingEmitRead(b, pool, dir, d, rec, n); got != n {
					b.Fatalf("read %d records, want %d", got, n)
				}
				done += n
			}
		})
	}
}

func blockingEmitRead(b *testing.B, pool *BufferPool, dir string, d *RecordDecoder, rec []byte, records int) int {
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, Blocking: true, SpillDir: dir}, pool, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Release()
	for i := 0; i < records; i++ {
		if err := p.EmitRecord(0, rec); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Finish(); err != nil {
		b.Fatal(err)
	}
	p.Close()
	v, err := p.CreateView(0, testConsumer, 8, func() {})
	if err != nil {
		b.Fatal(err)
	}
	ch := NewLocalInputChannel(v)
	defer ch.Release()
	d.Reset()
	n := 0
	for {
		buf, err := ch.Poll()
		if err != nil {
			b.Fatal(err)
		}
		if buf == nil {
			return n
		}
		if buf.Kind == KindData {
			if _, err := d.SetBuffer(buf); err != nil {
				b.Fatal(err)
			}
			for r, err := d.Next(); r != nil || err != nil; r, err = d.Next() {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
		ch.Recycle(buf)
	}
}
