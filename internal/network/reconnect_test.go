package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"
)

// TestRapidReconnectsKeepTheLiveViewIntact hammers one reconnectable subpartition with quick successive
// consumer attempts while the producer keeps writing records that span buffers (Flink left this race open
// as FLINK-19774). Every attempt may only ever see whole, uncorrupted records in increasing order; replaced
// attempts see ErrViewReleased or a closed connection, never someone else's data; the last attempt reads to
// the end.
func TestRapidReconnectsKeepTheLiveViewIntact(t *testing.T) {
	forEachTransport(t, func(t *testing.T, env *testEnv) {
		const bufSize = 96
		p, _ := env.partition(7, bufSize, 8, PartitionOptions{Reconnectable: true})
		stop := make(chan struct{})
		var produced sync.WaitGroup
		produced.Add(1)
		go func() {
			defer produced.Done()
			rng := rand.New(rand.NewSource(7))
			for i := 0; ; i++ {
				select {
				case <-stop:
					if err := p.Finish(); err != nil {
						t.Errorf("finish: %v", err)
					}
					return
				default:
				}
				if err := p.EmitRecord(0, patterned(i, 8+rng.Intn(3*bufSize))); err != nil {
					t.Errorf("emit: %v", err)
					return
				}
				if i%7 == 0 {
					p.Flush(0)
				}
				if i%13 == 0 {
					if err := p.BroadcastWatermark(int64(i)); err != nil {
						t.Errorf("watermark: %v", err)
						return
					}
				}
			}
		}()
		rng := rand.New(rand.NewSource(1))
		// The producer's watermarks rise; each attempt sees them rise, and a newer attempt never sees one
		// below what an older one saw (the re-sent last watermark is at least that).
		maxWatermark := int64(-1)
		const attempts = 40
		for a := 1; a <= attempts; a++ {
			owner := testConsumer
			owner.Number = int32(a)
			last := a == attempts
			if last {
				close(stop)
			}
			wake := make(chan struct{}, 1)
			ch, err := env.open(p.ID(), 0, owner, 2, bufSize, func() {
				select {
				case wake <- struct{}{}:
				default:
				}
			})
			if err != nil {
				t.Fatalf("attempt %d: %v", a, err)
			}
			reads := rng.Intn(6)
			if last {
				reads = 1 << 30
			}
			dec := NewRecordDecoder(1 << 20)
			ended := false
			deadline := time.After(10 * time.Second)
			for n := 0; n < reads && !ended; {
				b, err := ch.Poll()
				if err != nil {
					t.Fatalf("attempt %d: poll: %v", a, err)
				}
				if b == nil {
					select {
					case <-wake:
					case <-deadline:
						t.Fatalf("attempt %d: no data for 10s", a)
					}
					continue
				}
				n++
				if b.Kind == KindEvent {
					e, err := DecodeEvent(b.Payload())
					if err != nil {
						t.Fatalf("attempt %d: %v", a, err)
					}
					ended = e.Type == EventEndOfPartition
					if e.Type == EventWatermark {
						if e.TimestampMillis < maxWatermark {
							t.Fatalf("attempt %d: watermark %d after %d", a, e.TimestampMillis, maxWatermark)
						}
						maxWatermark = e.TimestampMillis
					}
					ch.Recycle(b)
					continue
				}
				if _, err := dec.SetBuffer(b); err != nil {
					t.Fatalf("attempt %d: %v", a, err)
				}
				for {
					rec, err := dec.Next()
					if err != nil {
						t.Fatalf("attempt %d: %v", a, err)
					}
					if rec == nil {
						break
					}
					if err := checkPatterned(rec, dec.NextSeq()-1); err != nil {
						t.Fatalf("attempt %d: %v", a, err)
					}
				}
				ch.Recycle(b)
			}
			if last && !ended {
				t.Fatal("the last attempt never saw the end of the partition")
			}
			if rng.Intn(3) > 0 || last {
				ch.Release() // otherwise the next attempt replaces this one while it is still attached
			}
		}
		produced.Wait()
		st := p.Stats()
		if st.ViewsCreated != attempts {
			t.Fatalf("%d views created, want %d", st.ViewsCreated, attempts)
		}
	})
}

// patterned makes record i: its index followed by bytes derived from it.
func patterned(i, size int) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint64(b, uint64(i))
	for j := 8; j < size; j++ {
		b[j] = byte(i*31 + j)
	}
	return b
}

func checkPatterned(rec []byte, seq uint64) error {
	if len(rec) < 8 {
		return errors.New("short record")
	}
	i := int(binary.LittleEndian.Uint64(rec))
	if uint64(i) != seq {
		return fmt.Errorf("record %d arrived as channel sequence %d", i, seq)
	}
	for j := 8; j < len(rec); j++ {
		if rec[j] != byte(i*31+j) {
			return fmt.Errorf("record %d corrupted at byte %d", i, j)
		}
	}
	return nil
}

// TestJoinInsideARecordSpanningBuffers: a decoder that joins where the first buffer it gets is all
// continuation must keep skipping into the next buffer and count the record once.
func TestJoinInsideARecordSpanningBuffers(t *testing.T) {
	mk := func(h Header, payload []byte) *Buffer {
		b := &Buffer{data: make([]byte, HeaderSize, 256)}
		b.Header = h
		b.data = append(b.data, payload...)
		b.Seal()
		return b
	}
	d := NewRecordDecoder(1 << 20)
	// Record 5 began in a dropped buffer and runs through two more; record 6 (2 bytes) follows.
	joined, err := d.SetBuffer(mk(Header{Kind: KindData, Continuation: 10, FirstSeq: 6}, make([]byte, 10)))
	if err != nil || joined {
		t.Fatalf("first buffer: joined=%v err=%v", joined, err)
	}
	if rec, err := d.Next(); rec != nil || err != nil {
		t.Fatalf("first buffer yielded %v %v", rec, err)
	}
	tail := append(make([]byte, 3), binary.LittleEndian.AppendUint32(nil, 2)...)
	tail = append(tail, 'o', 'k')
	joined, err = d.SetBuffer(mk(Header{Kind: KindData, Continuation: 3, Starts: 1, FirstSeq: 6}, tail))
	if err != nil || !joined {
		t.Fatalf("second buffer: joined=%v err=%v", joined, err)
	}
	rec, err := d.Next()
	if err != nil || string(rec) != "ok" || d.NextSeq() != 7 || d.PartialRecordsSkipped != 1 {
		t.Fatalf("got %q %v, next seq %d, skipped %d", rec, err, d.NextSeq(), d.PartialRecordsSkipped)
	}
}
