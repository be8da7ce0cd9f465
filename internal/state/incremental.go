package state

import (
	"fmt"
	"io"
)

// Incremental snapshots of the heap backend.
//
// A delta snapshot (format version 3) holds only what changed since the backend's previous snapshot
// write, its base: for each state that the segment cache covers (map, list map, list and timers state
// without TTL, segcache.go) the entries of every key whose state changed since the base, which replace
// the base's entries of that key, and, after the entries, a deletion for every key that held entries in
// the base and holds none now. Every other state (value and TTL states, restored entries of unregistered
// states, a state whose cache does not match the base) is written whole, marked as such in the header,
// and replaces the base's entries of that state. Keys that did not change are left out, which is the
// point: a checkpoint of q5's windows writes the auctions that got bids, not the whole window state.
//
// Whether a key changed is told by the epochs the tables keep per slot (segcache.go): a state's entries
// of a slot last changed in an epoch after the base's capture, or not. Keys that went since the base are
// the ones the key order drops; the segment cache's sizes (each key's bytes in the base) tell which of
// them, and which changed keys that hold nothing now, held entries there and get a deletion. So a delta
// builds on the last complete write, and only on it: the caller (the task, which stores each snapshot as
// a file) asks for a delta only when the previous write was stored and no write happened since, and
// otherwise writes a full snapshot (SnapshotIncremental). A delta after a write that failed builds on the
// last complete one and holds every state whole (the failed write left the sizes behind).
//
// Restore takes a chain: a full snapshot followed by the deltas built on it, in order, possibly several
// chains one after another (the old subtasks of a rescaled operator). readSnapshots reads them newest
// first and hands on, for each state and key, the entries of the newest snapshot that names the key (an
// entry or a deletion) or holds the state whole; a full snapshot ends a chain. The result is exactly
// the state of the newest snapshot of each chain.

// IncrementalSnapshotter is implemented by backends that can write a snapshot as a delta of their
// previous one (the heap backend).
type IncrementalSnapshotter interface {
	// SnapshotIncremental captures the state like Snapshot and returns two writers of the capture: full
	// writes a full snapshot, delta a delta snapshot that builds on the previous snapshot this backend
	// wrote completely (with either writer). Call one of them, once. delta is correct only if that
	// snapshot is restored before this one.
	// delta returns how many bytes of the snapshots it builds on it supersedes (entries it replaces or
	// deletes), which tells the caller when a chain holds more superseded bytes than live ones.
	SnapshotIncremental(checkpointID int64) (full func(w io.Writer) error, delta func(w io.Writer) (superseded int64, err error), err error)
}

// SnapshotIncremental returns b's full and delta writers of a capture for checkpointID, or, for a
// backend that writes no deltas (pebble), its Snapshot writer and a nil delta.
func SnapshotIncremental[K comparable](b KeyedBackend[K], checkpointID int64) (full func(w io.Writer) error, delta func(w io.Writer) (int64, error), err error) {
	if is, ok := b.(IncrementalSnapshotter); ok {
		return is.SnapshotIncremental(checkpointID)
	}
	full, err = b.Snapshot(checkpointID)
	return full, nil, err
}

// ChainStart returns the index in snapshots of the full snapshot the last ones build on: the last that is
// not a delta (0 if all are). A restore needs snapshots[ChainStart(snapshots):] of one chain; earlier ones
// are superseded.
func ChainStart(snapshots [][]byte) int {
	for i := len(snapshots) - 1; i >= 0; i-- {
		if !IsDelta(snapshots[i]) {
			return i
		}
	}
	return 0
}

// readSnapshots reads snapshots for a restore: full snapshots, each followed by the deltas that build on
// it (see above). onHeader is called for each snapshot before its entries, onEntry for the entries that
// hold in the result, never for a deletion nor for entries a newer snapshot of the chain replaced. The
// snapshots are read newest first. Errors name the snapshot (1-based, in the order given).
func readSnapshots(srcs []io.Reader, g keyGroups, onHeader func(*snapHeader) error, onEntry func(*snapEntry) error) error {
	var (
		whole   map[string]bool           // states a newer snapshot of the chain holds whole
		decided map[string]map[string]int // per state, the keys a newer delta named, by snapshot index
	)
	for i := len(srcs) - 1; i >= 0; i-- {
		var h *snapHeader
		err := readSnapshot(srcs[i], g, func(hd *snapHeader) error {
			h = hd
			return onHeader(hd)
		}, func(e *snapEntry) error {
			st := &h.states[e.state]
			if whole[st.name] {
				return nil
			}
			keys := decided[st.name]
			if at, ok := keys[string(e.key)]; ok && at != i {
				return nil // a newer delta holds the key's entries
			}
			if st.delta {
				if keys == nil {
					if decided == nil {
						decided = make(map[string]map[string]int)
					}
					keys = make(map[string]int)
					decided[st.name] = keys
				}
				if _, ok := keys[string(e.key)]; !ok {
					keys[string(e.key)] = i
				}
			}
			if e.deleted {
				return nil
			}
			return onEntry(e)
		})
		if err != nil {
			return fmt.Errorf("restore keyed state from snapshot %d of %d: %w", i+1, len(srcs), err)
		}
		if h.base == 0 {
			whole, decided = nil, nil // a full snapshot: the chain before it (another one) starts afresh
			continue
		}
		for _, st := range h.states {
			if !st.delta {
				if whole == nil {
					whole = make(map[string]bool)
				}
				whole[st.name] = true
			}
		}
	}
	return nil
}
