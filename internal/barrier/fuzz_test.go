package barrier

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// event is one call on an Aligner: 'b'arrier, 'c'ancel marker, 'e'nd of partition, job master 'a'bort or
// abort 'u'p to, channel 'r'eset.
type event struct {
	op byte
	ch int
	id int64
}

func (e event) String() string {
	switch e.op {
	case 'b':
		return fmt.Sprintf("barrier %d #%d", e.ch, e.id)
	case 'c':
		return fmt.Sprintf("cancel %d #%d", e.ch, e.id)
	case 'e':
		return fmt.Sprintf("end %d", e.ch)
	case 'a':
		return fmt.Sprintf("abort #%d", e.id)
	case 'u':
		return fmt.Sprintf("abort up to #%d", e.id)
	}
	return fmt.Sprintf("reset %d", e.ch)
}

// checker drives an Aligner like a task's mailbox loop would, keeps its own record of what the events and
// actions imply, and checks the aligner against it after every event.
type checker struct {
	a       *Aligner
	blocked []bool // what the caller was told to block
	ended   []bool
	// delivered holds the barrier ids each channel delivered since it was last reset.
	delivered []map[int64]bool
	maxID     []int64 // the highest barrier or cancel marker id each channel delivered
	reported  int64   // the highest id aborted or snapshotted
	// masterAborted holds the ids OnAbort was called with, masterAbortedUpTo the highest OnAbortUpTo's.
	masterAborted     map[int64]bool
	masterAbortedUpTo int64
	history           []string
}

func newChecker(n int, mode Mode) *checker {
	c := &checker{
		a:             New(n, mode),
		blocked:       make([]bool, n),
		ended:         make([]bool, n),
		delivered:     make([]map[int64]bool, n),
		maxID:         make([]int64, n),
		masterAborted: map[int64]bool{},
	}
	for i := range c.delivered {
		c.delivered[i] = map[int64]bool{}
	}
	return c
}

// step feeds e to the aligner and checks the action and the state that follow.
func (c *checker) step(e event) (Action, error) {
	var act Action
	switch e.op {
	case 'b':
		act = c.a.OnBarrier(e.ch, Checkpoint{ID: e.id, TimestampMillis: e.id * 10})
	case 'c':
		act = c.a.OnCancelMarker(e.ch, e.id)
	case 'e':
		act = c.a.OnEndOfPartition(e.ch)
	case 'a':
		act = c.a.OnAbort(e.id)
	case 'u':
		act = c.a.OnAbortUpTo(e.id)
	case 'r':
		act = c.a.OnChannelReset(e.ch)
	}
	c.history = append(c.history, fmt.Sprintf("%s -> %s", e, act))
	err := c.check(e, act)
	if err != nil {
		err = fmt.Errorf("%w\nstate: %s\nhistory:\n%s", err, c.a, joinLines(c.history))
	}
	return act, err
}

func joinLines(lines []string) string {
	var s string
	for _, l := range lines {
		s += "  " + l + "\n"
	}
	return s
}

func (c *checker) check(e event, act Action) error {
	a := c.a
	live := (e.op == 'b' || e.op == 'c') && !c.ended[e.ch] // a barrier or marker that counts
	// What the event itself implies.
	switch e.op {
	case 'b', 'c':
		if live {
			c.maxID[e.ch] = max(c.maxID[e.ch], e.id)
			if e.op == 'b' {
				c.delivered[e.ch][e.id] = true
			}
		}
	case 'e':
		c.ended[e.ch] = true
		c.blocked[e.ch] = false
	case 'a':
		c.masterAborted[e.id] = true
	case 'u':
		c.masterAbortedUpTo = max(c.masterAbortedUpTo, e.id)
	case 'r':
		c.ended[e.ch] = false
		c.delivered[e.ch] = map[int64]bool{}
	}

	// The action.
	if act.Dropped && (len(act.Aborts) > 0 || act.Snapshot != nil || act.UnblockAll || len(act.Block) > 0) {
		return fmt.Errorf("dropped with more to do: %s", act)
	}
	if a.mode == AtLeastOnce && (act.UnblockAll || len(act.Block) > 0) {
		return fmt.Errorf("at-least-once blocks: %s", act)
	}
	if len(act.Aborts) > 2 {
		return fmt.Errorf("%d aborts: %s", len(act.Aborts), act)
	}
	for _, ab := range act.Aborts {
		if ab.ID <= c.reported {
			return fmt.Errorf("abort of #%d after #%d was aborted or snapshotted", ab.ID, c.reported)
		}
		c.reported = ab.ID
	}
	if s := act.Snapshot; s != nil {
		if s.ID <= c.reported {
			return fmt.Errorf("snapshot of #%d after #%d was aborted or snapshotted", s.ID, c.reported)
		}
		c.reported = s.ID
		if c.masterAborted[s.ID] || s.ID <= c.masterAbortedUpTo {
			return fmt.Errorf("snapshot of #%d, which the job master aborted", s.ID)
		}
		if s.TimestampMillis != s.ID*10 {
			return fmt.Errorf("snapshot %+v does not carry its barrier", *s)
		}
		for ch := range c.ended {
			if !c.ended[ch] && !c.delivered[ch][s.ID] {
				return fmt.Errorf("snapshot of #%d before channel %d delivered its barrier", s.ID, ch)
			}
		}
	}
	if act.UnblockAll {
		clear(c.blocked)
	}
	for _, ch := range act.Block {
		if e.op != 'b' || ch != e.ch || c.blocked[ch] || c.ended[ch] {
			return fmt.Errorf("block %d after %s (blocked %v, ended %v)", ch, e, c.blocked[ch], c.ended[ch])
		}
		c.blocked[ch] = true
	}

	// The state.
	id, pending := a.Pending()
	var received, blocked, ended, aligned int
	for ch := range c.ended {
		if a.Blocked(ch) != c.blocked[ch] {
			return fmt.Errorf("Blocked(%d) = %v, but the actions said %v", ch, a.Blocked(ch), c.blocked[ch])
		}
		if a.Ended(ch) != c.ended[ch] {
			return fmt.Errorf("Ended(%d) = %v, want %v", ch, a.Ended(ch), c.ended[ch])
		}
		if a.blocked[ch] {
			blocked++
			if !a.received[ch] || !pending {
				return fmt.Errorf("channel %d blocked without having delivered the pending barrier", ch)
			}
		}
		if a.received[ch] {
			received++
			if !pending {
				return fmt.Errorf("channel %d marked received while idle", ch)
			}
			if a.mode == ExactlyOnce && !c.ended[ch] && !a.blocked[ch] {
				return fmt.Errorf("exactly-once: channel %d delivered #%d but is not blocked", ch, id)
			}
		}
		if c.ended[ch] {
			ended++
		}
		if a.received[ch] || c.ended[ch] {
			aligned++
		}
		if pending && !c.ended[ch] && c.maxID[ch] > id {
			return fmt.Errorf("still aligning #%d after channel %d delivered #%d", id, ch, c.maxID[ch])
		}
	}
	if blocked != a.numBlocked || ended != a.numEnded || (pending && aligned != a.numAligned) {
		return fmt.Errorf("counts: blocked %d/%d, ended %d/%d, aligned %d/%d",
			blocked, a.numBlocked, ended, a.numEnded, aligned, a.numAligned)
	}
	if pending {
		switch {
		case aligned == len(c.ended):
			return fmt.Errorf("still aligning #%d with every channel aligned", id)
		case id <= a.done || id <= a.LastCompleted():
			return fmt.Errorf("aligning #%d at or below done #%d", id, a.done)
		case c.masterAborted[id] || id <= c.masterAbortedUpTo:
			return fmt.Errorf("aligning #%d, which the job master aborted", id)
		}
	}
	if a.LastCompleted() > a.done {
		return fmt.Errorf("completed #%d above done #%d", a.LastCompleted(), a.done)
	}
	if len(a.aborted) > MaxAbortedIDs || !slices.IsSorted(a.aborted) {
		return fmt.Errorf("aborted ids %v", a.aborted)
	}
	if len(a.aborted) > 0 && (a.aborted[0] <= a.done || (pending && a.aborted[0] <= id)) {
		return fmt.Errorf("stale aborted ids %v", a.aborted)
	}
	return nil
}

// decodeEvents turns fuzz input into a task's configuration and a sequence of events. Ids stay below
// MaxAbortedIDs so that no aborted id is ever forgotten. Unless an event's high bit is set, an event on a
// channel the caller was told to block is left out, as a mailbox loop would.
func decodeEvents(data []byte) (n int, mode Mode, evs []event, strict []bool) {
	if len(data) == 0 {
		return 1, ExactlyOnce, nil, nil
	}
	n, mode = 1+int(data[0]%4), Mode(data[0]>>2&1)
	for i := 1; i+1 < len(data); i += 2 {
		b0, b1 := data[i], data[i+1]
		e := event{ch: int(b0>>3&0x0f) % n, id: int64(b1 % 16)}
		e.op = "bbbceabr"[b0&7]
		if e.op == 'a' && b1&0x80 != 0 {
			e.op = 'u'
		}
		evs = append(evs, e)
		strict = append(strict, b0&0x80 == 0)
	}
	return n, mode, evs, strict
}

func runEvents(t testing.TB, data []byte) {
	n, mode, evs, strict := decodeEvents(data)
	c := newChecker(n, mode)
	for i, e := range evs {
		if strict[i] && (e.op == 'b' || e.op == 'c' || e.op == 'e') && c.blocked[e.ch] {
			continue
		}
		if _, err := c.step(e); err != nil {
			t.Fatalf("%d channels, %s: %v", n, mode, err)
		}
	}
}

func FuzzAligner(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{2, 0, 1, 8, 1, 16, 1})                   // three channels align #1
	f.Add([]byte{1, 0, 1, 8, 2, 0, 2, 8, 2})              // two channels, a newer barrier on a blocked channel
	f.Add([]byte{6, 0, 3, 3, 5, 5, 4, 8, 4, 16, 4})       // at-least-once with a cancel and an abort
	f.Add([]byte{3, 0, 1, 6, 0, 8, 1, 4, 0, 24, 2, 8, 2}) // four channels, reset and end
	f.Fuzz(func(t *testing.T, data []byte) { runEvents(t, data) })
}

// TestRandomEvents runs the fuzz target's checks over many seeded random sequences, so that plain go test
// covers more than the seed corpus.
func TestRandomEvents(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		data := make([]byte, 1+2*rng.IntN(60))
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		runEvents(t, data)
	}
}

// TestNeverWaitsForMissingBarrier plays realistic histories: every channel delivers its events in order with
// increasing ids, some checkpoints are cancelled upstream or skipped on a channel, producers restart, the job
// master aborts checkpoints (one by one or up to an id), channels end, and the caller never reads a blocked channel. Every channel's
// history ends with the barrier of the same last checkpoint (or an end of partition). The caller must never
// be stuck with only blocked channels left to read, no older checkpoint may still be aligning at the end, and
// a final round of barriers completes.
func TestNeverWaitsForMissingBarrier(t *testing.T) {
	const last = 12
	rng := rand.New(rand.NewPCG(3, 4))
	for run := range 2000 {
		n, mode := 1+rng.IntN(4), Mode(rng.IntN(2))
		queues := make([][]event, n)
		for ch := range queues {
			for id := int64(1); id <= last; id++ {
				switch r := rng.IntN(20); {
				case id == last || r < 14:
					queues[ch] = append(queues[ch], event{op: 'b', ch: ch, id: id})
				case r < 16:
					queues[ch] = append(queues[ch], event{op: 'c', ch: ch, id: id})
				case r < 17:
					queues[ch] = append(queues[ch], event{op: 'r', ch: ch})
				case r < 18 && id > last/2:
					queues[ch] = append(queues[ch], event{op: 'e', ch: ch})
					id = last // nothing follows
				} // otherwise the channel skips id
			}
		}
		c := newChecker(n, mode)
		for {
			var readable []int
			waiting := false
			for ch, q := range queues {
				if len(q) == 0 {
					continue
				}
				waiting = true
				if !c.blocked[ch] || q[0].op == 'r' { // a reset comes from the network, not from reading
					readable = append(readable, ch)
				}
			}
			if !waiting {
				break
			}
			if len(readable) == 0 {
				t.Fatalf("run %d: %d channels, %s: every channel with events left is blocked: %s\nhistory:\n%s",
					run, n, mode, c.a, joinLines(c.history))
			}
			ch := readable[rng.IntN(len(readable))]
			e := queues[ch][0]
			queues[ch] = queues[ch][1:]
			if _, err := c.step(e); err != nil {
				t.Fatalf("run %d: %d channels, %s: %v", run, n, mode, err)
			}
			if r := rng.IntN(40); r < 4 {
				op := byte('a')
				if r == 0 {
					op = 'u'
				}
				if _, err := c.step(event{op: op, id: 1 + rng.Int64N(last-1)}); err != nil {
					t.Fatalf("run %d: %d channels, %s: %v", run, n, mode, err)
				}
			}
		}
		allEnded := !slices.Contains(c.ended, false)
		if id, ok := c.a.Pending(); ok || (!allEnded && c.a.done < last) {
			t.Fatalf("run %d: %d channels, %s: pending #%d (%v), done #%d after every channel delivered #%d\nhistory:\n%s",
				run, n, mode, id, ok, c.a.done, last, joinLines(c.history))
		}
		for _, ch := range rng.Perm(n) {
			if c.ended[ch] {
				continue
			}
			if _, err := c.step(event{op: 'b', ch: ch, id: last + 1}); err != nil {
				t.Fatalf("run %d: %d channels, %s: %v", run, n, mode, err)
			}
		}
		if !allEnded && c.a.LastCompleted() != last+1 {
			t.Fatalf("run %d: %d channels, %s: last completed #%d after the final round\nhistory:\n%s",
				run, n, mode, c.a.LastCompleted(), joinLines(c.history))
		}
	}
}
