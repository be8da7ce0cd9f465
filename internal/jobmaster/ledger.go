package jobmaster

import "github.com/runnel-dev/runnel/internal/ident"

// lossLedger makes approximate recovery's loss exact when failovers overlap.
//
// A restarted consumer attempt reports, for each channel from a producer that kept running, the records
// between the position it restored and the first record it received (task.ChannelJoined). Alone, that is
// the loss of its failover. But when the consumer fails again and its next attempt restores a checkpoint
// that does not hold the previous attempt's state (the previous attempt was deployed after that
// checkpoint was triggered), the next attempt's gap starts at the same restored position and so covers
// what the previous attempt already reported: counting both would count those records twice. The ledger
// keeps what each attempt counted per channel and subtracts, from a new attempt's gap, what the attempts
// it rolls back counted. Summed over the failovers, the loss is then the gaps in the state that survives,
// which is what a checker of that state sees.
//
// It is a pure value: no clock, no goroutine. Its size is bounded by prune: an entry is kept only while a
// restore could still roll its attempt back (no retained checkpoint holds its state yet) and while its
// producer attempt is the current one (no consumer joins a replaced producer's channel again).
type lossLedger struct {
	entries map[ledgerKey][]ledgerEntry
}

// ledgerKey is one channel as one consumer subtask reads it (the channel names the producer attempt).
type ledgerKey struct {
	consumer ident.Subtask
	channel  channelKey
}

// ledgerEntry is what one consumer attempt counted on one channel.
type ledgerEntry struct {
	attempt int32
	// skipUpTo is the highest checkpoint id triggered before the attempt was deployed: checkpoints above
	// it hold this attempt's state, those up to it do not.
	skipUpTo int64
	counted  uint64
}

// join records that consumer attempt a, which restored checkpoint restoredFrom (nil: none) and was
// deployed when skipUpTo was the last checkpoint triggered, joined channel ch with a gap of gap records.
// It returns the records to count for this join: the gap minus what earlier attempts of the consumer
// counted on the channel and this restore rolled back. ok is false when the subtraction would go below
// zero, which only a restore that skips over a checkpoint a rolled-back attempt's records were committed
// to can cause (a damaged checkpoint passed over between overlapping failures); the count is then 0.
func (l *lossLedger) join(a ident.Attempt, ch channelKey, restoredFrom *int64, skipUpTo int64, gap uint64) (count uint64, ok bool) {
	if l.entries == nil {
		l.entries = make(map[ledgerKey][]ledgerEntry)
	}
	key := ledgerKey{consumer: a.Subtask, channel: ch}
	var rolledBack uint64
	for _, e := range l.entries[key] {
		if e.attempt < a.Number && (restoredFrom == nil || *restoredFrom <= e.skipUpTo) {
			rolledBack += e.counted
		}
	}
	count, ok = gap-rolledBack, gap >= rolledBack
	if !ok {
		count = 0
	}
	l.entries[key] = append(l.entries[key], ledgerEntry{attempt: a.Number, skipUpTo: skipUpTo, counted: count})
	return count, ok
}

// prune forgets entries that no restore can roll back any more: those of attempts whose state every
// checkpoint a restore may still choose holds (skipUpTo below floor, the oldest such checkpoint's id; 0:
// no floor yet), and those of channels whose producer attempt current does not name any longer.
func (l *lossLedger) prune(floor int64, current func(ident.Attempt) bool) {
	for key, es := range l.entries {
		if !current(key.channel.p.Producer) {
			delete(l.entries, key)
			continue
		}
		kept := es[:0]
		for _, e := range es {
			if floor == 0 || e.skipUpTo >= floor {
				kept = append(kept, e)
			}
		}
		if len(kept) == 0 {
			delete(l.entries, key)
		} else {
			l.entries[key] = kept
		}
	}
}

// size returns the number of entries, for tests of its bound.
func (l *lossLedger) size() int {
	n := 0
	for _, es := range l.entries {
		n += len(es)
	}
	return n
}
