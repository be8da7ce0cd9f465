package jobcore

import "github.com/runnel-dev/runnel/internal/ident"

// LossLedger makes approximate recovery's loss exact when failovers overlap.
//
// A restarted consumer attempt reports, for each channel from a producer that kept running, the records
// between the position it restored and the first record it received (deploy.ChannelJoined): the loss of the
// failover that deployed it, as a gap in the consumer's state. When the consumer fails again and its next
// attempt restores a checkpoint that does not hold the previous attempt's state (the previous attempt was
// deployed after that checkpoint was triggered), those gaps are rolled back with the state, and the later
// failover counts the whole loss since that checkpoint afresh: on a channel whose producer kept running its
// gap starts at the same restored position, so it covers the earlier gap; on a channel whose producer was
// restarted too, what the earlier gap missed is either replayed (a rewound source) or counted upstream, on
// the channels into the restarted producers. So the ledger keeps what each restarted attempt counted per
// channel, and when a restore rolls an attempt back, it takes that attempt's counts out of the failover
// that had reported them. Summed over the failovers, the loss is then the gaps in the state that survives,
// which is what a checker of that state sees; each failover reports what it lost and no later failover
// re-counted.
//
// It is a pure value: no clock, no goroutine. Its size is bounded by Prune: an entry is kept only while a
// restore could still roll its attempt back (no retained checkpoint holds its state yet).
type LossLedger struct {
	entries map[ident.Subtask][]ledgerEntry
}

// ledgerEntry is what one restarted consumer attempt counted on one channel, and where it was reported.
type ledgerEntry struct {
	attempt int32
	// skipUpTo is the highest checkpoint id triggered before the attempt was deployed: checkpoints above
	// it hold this attempt's state, those up to it do not.
	skipUpTo int64
	ev       *Failover
	loss     ChannelLoss
}

// Join records that consumer attempt a, deployed by failover ev when skipUpTo was the last checkpoint
// triggered, counted loss on one of its channels (already added to ev with Add).
func (l *LossLedger) Join(a ident.Attempt, skipUpTo int64, ev *Failover, loss ChannelLoss) {
	if loss.RecordsLost+loss.RecordsDropped+loss.BuffersDropped+loss.PartialRecordsSkipped == 0 {
		return // nothing to take back
	}
	if l.entries == nil {
		l.entries = make(map[ident.Subtask][]ledgerEntry)
	}
	l.entries[a.Subtask] = append(l.entries[a.Subtask], ledgerEntry{attempt: a.Number, skipUpTo: skipUpTo, ev: ev, loss: loss})
}

// RollBack is called when subtask s restarts from checkpoint restoredFrom (nil: none): the counts of its
// attempts whose state that checkpoint does not hold leave the failovers that reported them.
func (l *LossLedger) RollBack(s ident.Subtask, restoredFrom *int64) {
	es := l.entries[s]
	kept := es[:0]
	for _, e := range es {
		if !rolledBack(restoredFrom, e.skipUpTo) {
			kept = append(kept, e)
			continue
		}
		e.ev.retract(e.loss)
	}
	if len(kept) == 0 {
		delete(l.entries, s)
	} else {
		l.entries[s] = kept
	}
}

// rolledBack reports whether a restore of restoredFrom (nil: none) rolls back the state of an attempt
// whose gaps only checkpoints above skipUpTo hold.
func rolledBack(restoredFrom *int64, skipUpTo int64) bool {
	return restoredFrom == nil || *restoredFrom <= skipUpTo
}

// Prune forgets entries that no restore can roll back any more: those of attempts whose state every
// checkpoint a restore may still choose holds (skipUpTo below floor, the oldest such checkpoint's id; 0:
// no floor yet).
func (l *LossLedger) Prune(floor int64) {
	if floor == 0 {
		return
	}
	for s, es := range l.entries {
		kept := es[:0]
		for _, e := range es {
			if e.skipUpTo >= floor {
				kept = append(kept, e)
			}
		}
		if len(kept) == 0 {
			delete(l.entries, s)
		} else {
			l.entries[s] = kept
		}
	}
}

// events returns the failovers that entries refer to: a restore may still take counts out of them.
func (l *LossLedger) events() map[*Failover]bool {
	m := make(map[*Failover]bool)
	for _, es := range l.entries {
		for _, e := range es {
			m[e.ev] = true
		}
	}
	return m
}

// size returns the number of entries, for tests of its bound.
func (l *LossLedger) size() int {
	n := 0
	for _, es := range l.entries {
		n += len(es)
	}
	return n
}
