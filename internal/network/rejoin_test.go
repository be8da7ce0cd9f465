package network

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// streamOf writes records from..to-1 (patterned, 8 to 8+maxRec-1 bytes, the size a function of the record)
// into a fresh partition with buffers of bufSize bytes, numbering them from from, and returns its buffers
// in order.
func streamOf(t *testing.T, from, to, bufSize, maxRec, flushEvery int) []*Buffer {
	t.Helper()
	pool := NewBufferPool("stream", bufSize, 1<<14)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1, MaxRecordSize: 1 << 20}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetNextSequence(0, uint64(from)); err != nil {
		t.Fatal(err)
	}
	for i := from; i < to; i++ {
		if err := p.EmitRecord(0, patterned(i, 8+(i*37)%maxRec)); err != nil {
			t.Fatal(err)
		}
		if flushEvery > 0 && i%flushEvery == 0 {
			p.Flush(0) // a buffer that ends at a record's end
		}
	}
	p.Flush(0)
	v, err := p.CreateView(0, testConsumer, 1<<14, func() {})
	if err != nil {
		t.Fatal(err)
	}
	var out []*Buffer
	for {
		b, err := v.Poll()
		if err != nil {
			t.Fatal(err)
		}
		if b == nil {
			return out
		}
		out = append(out, b)
	}
}

// TestRejoinDropsRegeneratedRecords: a decoder that read the first k records of a stream (stopping mid
// buffer, inside a record that spans buffers, or at a buffer's end) and is then rejoined at its next record
// reads a regenerated stream of the same records from m <= k on, cut into buffers of another size, and
// returns exactly the records from k on, each once and whole, having dropped k - m; a regenerated stream
// that starts after k is refused, since records would be missing.
func TestRejoinDropsRegeneratedRecords(t *testing.T) {
	const n = 400
	for _, tc := range []struct {
		name            string
		buffers         int // how many buffers of the original stream the decoder read
		origSize, regen int
		maxRec          int
		flushEvery      int // in the original stream
		from            int // where the regenerated stream starts
		wantErr         string
	}{
		{name: "from the start, smaller buffers", buffers: 30, origSize: 128, regen: 64, maxRec: 300, from: 0},
		{name: "from a later record, larger buffers", buffers: 41, origSize: 96, regen: 512, maxRec: 300, from: -3},
		{name: "from exactly where it stopped", buffers: 25, origSize: 128, regen: 128, maxRec: 300, from: -1},
		{name: "small records, stopped at a record's end", buffers: 25, origSize: 256, regen: 100, maxRec: 12, flushEvery: 1, from: -3},
		{name: "a gap", buffers: 20, origSize: 128, regen: 128, maxRec: 300, from: -2, wantErr: "regenerated stream starts at record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := streamOf(t, 0, n, tc.origSize, tc.maxRec, tc.flushEvery)
			dec := NewRecordDecoder(1 << 20)
			var got []uint64
			read := func(b *Buffer) error {
				if _, err := dec.SetBuffer(b); err != nil {
					return err
				}
				for {
					rec, err := dec.Next()
					if err != nil {
						return err
					}
					if rec == nil {
						return nil
					}
					seq := dec.NextSeq() - 1
					if err := checkPatterned(rec, seq); err != nil {
						return err
					}
					if want := 8 + (int(seq)*37)%tc.maxRec; len(rec) != want {
						return fmt.Errorf("record %d has %d bytes, want %d", seq, len(rec), want)
					}
					got = append(got, seq)
				}
			}
			for _, b := range orig[:tc.buffers] {
				if err := read(b); err != nil {
					t.Fatal(err)
				}
			}
			k := int(dec.NextSeq())
			inRecord := dec.InRecord()
			from := tc.from
			switch from {
			case -1:
				from = k
			case -2:
				from = k + 1
			case -3:
				from = k / 2
			}
			dec.Rejoin(uint64(k))
			var err error
			for _, b := range streamOf(t, from, n, tc.regen, tc.maxRec, 0) {
				if err = read(b); err != nil {
					break
				}
			}
			if tc.wantErr != "" {
				if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != n {
				t.Fatalf("%d records, want %d (stopped at %d, inside a record: %v)", len(got), n, k, inRecord)
			}
			for i, s := range got {
				if s != uint64(i) {
					t.Fatalf("record %d is %d", i, s)
				}
			}
			if dec.DuplicatesDropped != uint64(k-from) {
				t.Fatalf("dropped %d, want %d", dec.DuplicatesDropped, k-from)
			}
			t.Logf("stopped at record %d (inside a record: %v), dropped %d", k, inRecord, dec.DuplicatesDropped)
		})
	}
}

// TestRejoinAgainWhileDropping: a producer that restarts a second time while its consumer still drops what
// the first restart regenerated must not make the consumer return the records between where its dropping
// had got to and the first record it had not had: Resume, not NextSeq, is where the consumer stands.
func TestRejoinAgainWhileDropping(t *testing.T) {
	const n, k = 300, 200
	orig := streamOf(t, 0, n, 128, 60, 0)
	dec := NewRecordDecoder(1 << 20)
	var got []uint64
	read := func(bs []*Buffer, until func() bool) {
		t.Helper()
		for _, b := range bs {
			if until() {
				return
			}
			got = decodeSeqs(t, dec, b, got)
		}
	}
	read(orig, func() bool { return dec.NextSeq() >= k })
	had := dec.Resume()
	dec.Rejoin(had)
	// The first regenerated stream, from record 10: read until the decoder dropped past record 50, but not
	// up to where the consumer stood.
	read(streamOf(t, 10, n, 64, 60, 0), func() bool { return dec.Synced() && dec.NextSeq() > 50 })
	if !dec.Rejoining() || dec.NextSeq() >= had {
		t.Fatalf("the decoder should still be dropping: next %d, had up to %d", dec.NextSeq(), had)
	}
	if dec.Resume() != had {
		t.Fatalf("Resume %d while dropping, want %d", dec.Resume(), had)
	}
	dropped := dec.DuplicatesDropped
	dec.Rejoin(dec.Resume())
	read(streamOf(t, 0, n, 96, 60, 0), func() bool { return false })
	if len(got) != n {
		t.Fatalf("%d records, want %d", len(got), n)
	}
	for i, s := range got {
		if s != uint64(i) {
			t.Fatalf("record %d is %d", i, s)
		}
	}
	if dec.Rejoining() || dec.DuplicatesDropped != dropped+had {
		t.Fatalf("dropped %d (rejoining %v), want %d", dec.DuplicatesDropped, dec.Rejoining(), dropped+had)
	}
}

// TestSkipToDropsWhatTheStateHolds: a fresh decoder of a restored consumer whose state holds the records
// before k drops those its channel delivers again (a log served from a barrier before k) and returns the
// rest once each; a channel that starts after k (no log: approximate recovery's loss) is taken as it is.
func TestSkipToDropsWhatTheStateHolds(t *testing.T) {
	const n, k = 300, 120
	for _, tc := range []struct {
		name        string
		from        int
		wantFirst   uint64
		wantDropped uint64
	}{
		{name: "from a barrier before the position", from: 50, wantFirst: k, wantDropped: k - 50},
		{name: "from the position", from: k, wantFirst: k},
		{name: "after the position", from: k + 30, wantFirst: k + 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := NewRecordDecoder(1 << 20)
			dec.SkipTo(k)
			if got := dec.Resume(); got != k {
				t.Fatalf("Resume before the first buffer = %d, want %d (what a checkpoint records)", got, k)
			}
			var got []uint64
			for _, b := range streamOf(t, tc.from, n, 128, 60, 0) {
				got = decodeSeqs(t, dec, b, got)
			}
			if len(got) == 0 || got[0] != tc.wantFirst || got[len(got)-1] != n-1 || len(got) != n-int(tc.wantFirst) {
				t.Fatalf("returned %d records from %v, want %d..%d", len(got), got[:min(3, len(got))], tc.wantFirst, n-1)
			}
			if dec.DuplicatesDropped != tc.wantDropped {
				t.Fatalf("dropped %d, want %d", dec.DuplicatesDropped, tc.wantDropped)
			}
		})
	}
}

// decodeSeqs hands b to dec and appends the sequence number of every record dec returns from it to seqs.
func decodeSeqs(t *testing.T, dec *RecordDecoder, b *Buffer, seqs []uint64) []uint64 {
	t.Helper()
	if _, err := dec.SetBuffer(b); err != nil {
		t.Fatal(err)
	}
	for {
		rec, err := dec.Next()
		if err != nil {
			t.Fatal(err)
		}
		if rec == nil {
			return seqs
		}
		seqs = append(seqs, dec.NextSeq()-1)
	}
}
