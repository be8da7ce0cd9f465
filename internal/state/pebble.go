package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/runnel-dev/runnel/codec"
)

// snapshotSweep is how many store keys Snapshot sweeps in a backend with TTL states.
const snapshotSweep = 1024

// restoreBatchBytes is the size at which Restore commits a pebble batch.
const restoreBatchBytes = 4 << 20

// pebbleState is one state known to a pebble backend: registered, or restored and waiting to be.
type pebbleState struct {
	name       string
	id         uint16
	kind       kind
	registered bool
	flags      byte  // flagTTL for a TTL state
	ttl        int64 // time to live in ms of a registered TTL state, else 0
}

// pebbleStore is the non-generic part of the pebble backend.
type pebbleStore struct {
	declarations
	db     *pebble.DB
	dir    string
	groups keyGroups
	// key is [key group][state id][uvarint length][key] of the current key; the state id bytes are
	// written by each access. Empty before the first SetCurrentKey.
	key    []byte
	mkey   []byte // key ‖ map key, for map state accesses
	states map[string]*pebbleState
	byID   []*pebbleState
	timers []*pebbleTimers // registered timers states, whose caches Restore rebuilds
	// now is the processing-time clock (epoch ms) of TTL states; sweepFrom the store key the next Sweep
	// starts at (nil: the start of the range).
	now       func() int64
	ttls      int
	sweepFrom []byte
	// setCur makes the key with store bytes uvarint(length) ‖ key in key group kg current; set by the
	// generic backend, for FireUpTo.
	setCur func(kg int, lenKey []byte) error

	mu      sync.Mutex
	closed  bool
	pending map[*pebble.Snapshot]struct{} // captures whose write has not started
	writing sync.WaitGroup                // writes in progress
}

func (st *pebbleStore) register(name string, k kind) (uint16, error) {
	s, err := st.registerFlags(name, k, 0)
	if err != nil {
		return 0, err
	}
	return s.id, nil
}

// registerTTL registers a TTL state with its time to live in ms.
func (st *pebbleStore) registerTTL(name string, k kind, ms int64) (uint16, error) {
	s, err := st.registerFlags(name, k, flagTTL)
	if err != nil {
		return 0, err
	}
	s.ttl = ms
	st.ttls++
	return s.id, nil
}

func (st *pebbleStore) registerFlags(name string, k kind, flags byte) (*pebbleState, error) {
	s, ok := st.states[name]
	if err := st.checkDeclare(k, name, ok && s.registered); err != nil {
		return nil, err
	}
	if ok {
		if s.kind != k {
			return nil, fmt.Errorf("keyed state %q is registered as %s state but was restored as %s state", name, k, s.kind)
		}
		if s.flags != flags {
			return nil, flagsMismatch(name, flags, s.flags)
		}
		s.registered = true
		return s, nil
	}
	s, err := st.add(name, k, flags)
	if err != nil {
		return nil, err
	}
	s.registered = true
	return s, nil
}

func (st *pebbleStore) add(name string, k kind, flags byte) (*pebbleState, error) {
	if len(st.byID) >= maxStates {
		return nil, fmt.Errorf("keyed state %q: more than %d states in one operator", name, maxStates)
	}
	s := &pebbleState{name: name, id: uint16(len(st.byID)), kind: k, flags: flags}
	st.states[name] = s
	st.byID = append(st.byID, s)
	return s, nil
}

// keyFor returns the store key of the current key in state id, or false before the first SetCurrentKey.
func (st *pebbleStore) keyFor(id uint16) ([]byte, bool) {
	if len(st.key) == 0 {
		return nil, false
	}
	st.key[2], st.key[3] = byte(id>>8), byte(id)
	return st.key, true
}

// mustKeyFor is keyFor for accesses that need a current key.
func (st *pebbleStore) mustKeyFor(id uint16, name, op string) []byte {
	k, ok := st.keyFor(id)
	if !ok {
		panic(&AccessError{State: name, Op: op, Err: errNoCurrentKey})
	}
	return k
}

func (st *pebbleStore) get(key []byte, name string) ([]byte, io.Closer, bool) {
	v, c, err := st.db.Get(key)
	if err == pebble.ErrNotFound {
		return nil, nil, false
	}
	if err != nil {
		panic(&AccessError{State: name, Op: "get", Err: err})
	}
	return v, c, true
}

func (st *pebbleStore) check(err error, name, op string) {
	if err != nil {
		panic(&AccessError{State: name, Op: op, Err: err})
	}
}

// prefixEnd returns the smallest key greater than every key that starts with p, or nil if there is none.
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i]++; end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

// splitKey splits a store key into key group, state id, the key's uvarint(length) ‖ key, the key, and the
// rest (the map key).
func splitKey(k []byte) (kg int, id uint16, lenKey, key, rest []byte, err error) {
	if len(k) < 5 {
		return 0, 0, nil, nil, nil, fmt.Errorf("store key %x is too short", k)
	}
	n, ln := binary.Uvarint(k[4:])
	if ln <= 0 || n > uint64(len(k)-4-ln) {
		return 0, 0, nil, nil, nil, fmt.Errorf("store key %x has a bad key length", k)
	}
	end := 4 + ln + int(n)
	return int(binary.BigEndian.Uint16(k)), binary.BigEndian.Uint16(k[2:]), k[4:end], k[4+ln : end], k[end:], nil
}

// pebbleBackend is the pebble KeyedBackend.
type pebbleBackend[K comparable] struct {
	pebbleStore
	kc     codec.Codec[K]
	cur    K
	enc    []byte
	hasCur bool
}

// quietLogger drops pebble's informational messages.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}

func (quietLogger) Fatalf(format string, args ...any) { panic(fmt.Sprintf("pebble: "+format, args...)) }

// NewPebble makes an empty pebble (on-disk) backend in a new working directory inside o.Dir.
func NewPebble[K comparable](o Options[K]) (KeyedBackend[K], error) {
	kc, g, err := o.validate()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(o.Dir, "runnel-state-")
	if err != nil {
		return nil, fmt.Errorf("pebble state backend: make working directory: %w", err)
	}
	db, err := pebble.Open(dir, &pebble.Options{
		DisableWAL:    true, // scratch space: checkpoints make state durable
		ErrorIfExists: true,
		Logger:        quietLogger{},
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pebble state backend: open %s: %w", dir, err)
	}
	b := &pebbleBackend[K]{
		pebbleStore: pebbleStore{declarations: declarations{owner: o.Owner}, db: db, dir: dir, groups: g, states: make(map[string]*pebbleState),
			pending: make(map[*pebble.Snapshot]struct{}), now: clockOr(o.Now)},
		kc: kc,
	}
	b.setCur = b.setCurrentEncoded
	return b, nil
}

// setCurrentEncoded makes the key stored as uvarint(length) ‖ key in key group kg current.
func (b *pebbleBackend[K]) setCurrentEncoded(kg int, lenKey []byte) error {
	_, ln := binary.Uvarint(lenKey)
	var k K
	if err := b.kc.Decode(lenKey[ln:], &k); err != nil {
		return fmt.Errorf("decode key: %w", err)
	}
	b.key = append(append(b.key[:0], byte(kg>>8), byte(kg), 0, 0), lenKey...)
	b.cur, b.hasCur = k, true
	return nil
}

func (b *pebbleBackend[K]) store() any { return &b.pebbleStore }

// SetCurrentKey implements KeyedBackend: it encodes k and computes its key group, unless k is the current
// key already.
func (b *pebbleBackend[K]) SetCurrentKey(k K) {
	if b.hasCur && k == b.cur {
		return
	}
	enc, err := b.kc.Append(b.enc[:0], k)
	b.enc = enc
	if err != nil {
		panic(&AccessError{Op: "set current key", Err: fmt.Errorf("encode key %v: %w", k, err)})
	}
	kg := KeyGroup(enc, b.groups.maxP)
	if !b.groups.owns(kg) {
		panic(&AccessError{Op: "set current key", Err: fmt.Errorf("key %v is in key group %d, not in [%d, %d]: %w",
			k, kg, b.groups.start, b.groups.end, ErrKeyGroupOutOfRange)})
	}
	b.key = append(b.key[:0], byte(kg>>8), byte(kg), 0, 0)
	b.key = binary.AppendUvarint(b.key, uint64(len(enc)))
	b.key = append(b.key, enc...)
	b.cur, b.hasCur = k, true
}

// CurrentKey implements KeyedBackend.
func (b *pebbleBackend[K]) CurrentKey() K { return b.cur }

// ForEachKey implements KeyedBackend; keys come by key group, then in the order of their encodings' store
// keys. It reads a point-in-time view, so f may change state.
func (b *pebbleBackend[K]) ForEachKey(f func(k K) error) error {
	prevKey, prevCur, prevHas := bytes.Clone(b.key), b.cur, b.hasCur
	defer func() { b.key, b.cur, b.hasCur = prevKey, prevCur, prevHas }()
	lo := []byte{byte(b.groups.start >> 8), byte(b.groups.start)}
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd([]byte{byte(b.groups.end >> 8), byte(b.groups.end)})})
	if err != nil {
		return fmt.Errorf("keyed state: iterate keys: %w", err)
	}
	defer it.Close()
	var (
		group   [][]byte // uvarint(length) ‖ key of the keys in key group kg
		seen    = make(map[string]struct{})
		groupKG = -1
	)
	visit := func() error {
		slices.SortFunc(group, bytes.Compare)
		for _, lk := range group {
			_, ln := binary.Uvarint(lk)
			var k K
			if err := b.kc.Decode(lk[ln:], &k); err != nil {
				return fmt.Errorf("keyed state: decode key: %w", err)
			}
			b.key = append(append(b.key[:0], byte(groupKG>>8), byte(groupKG), 0, 0), lk...)
			b.cur, b.hasCur = k, true
			if err := f(k); err != nil {
				return err
			}
		}
		group = group[:0]
		clear(seen)
		return nil
	}
	for valid := it.First(); valid; {
		k := it.Key()
		if len(k) < 4 {
			return fmt.Errorf("keyed state: store key %x is too short", k)
		}
		id := binary.BigEndian.Uint16(k[2:])
		if int(id) >= len(b.byID) || !b.byID[id].registered {
			valid = it.Next()
			continue
		}
		var (
			kg  int
			lk  []byte
			err error
		)
		sk := b.byID[id].kind
		if sk == kindTimers {
			kg, _, lk, _, _, err = splitTimerKey(k)
		} else {
			kg, _, lk, _, _, err = splitKey(k)
		}
		if err != nil {
			return fmt.Errorf("keyed state: %w", err)
		}
		if kg != groupKG {
			if err := visit(); err != nil {
				return err
			}
			groupKG = kg
		}
		if _, ok := seen[string(lk)]; !ok {
			seen[string(lk)] = struct{}{}
			group = append(group, bytes.Clone(lk))
		}
		if sk == kindMap || sk == kindListMap {
			// Skip the key's other map entries.
			valid = it.SeekGE(prefixEnd(it.Key()[:4+len(lk)]))
		} else {
			valid = it.Next()
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("keyed state: iterate keys: %w", err)
	}
	return visit()
}

// Snapshot implements KeyedBackend: it takes a pebble snapshot, which the write function iterates.
func (b *pebbleBackend[K]) Snapshot(checkpointID int64) (func(w io.Writer) error, error) {
	h := &snapHeader{checkpointID: checkpointID, groups: b.groups}
	ids := make([]uint16, 0, len(b.byID))
	for _, s := range slices.SortedFunc(slices.Values(b.byID), func(a, c *pebbleState) int { return strings.Compare(a.name, c.name) }) {
		h.states = append(h.states, snapState{name: s.name, kind: s.kind, flags: s.flags, ttl: s.ttl})
		ids = append(ids, s.id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("snapshot keyed state: backend is closed")
	}
	if b.ttls > 0 {
		h.now = b.now()
		// Incremental cleanup at each checkpoint, bounded, so that expired entries never read again leave
		// the store even if the operator does not sweep.
		if _, err := b.Sweep(h.now, snapshotSweep); err != nil {
			return nil, err
		}
	}
	snap := b.db.NewSnapshot()
	b.pending[snap] = struct{}{}
	return func(w io.Writer) error {
		b.mu.Lock()
		if _, ok := b.pending[snap]; !ok {
			b.mu.Unlock()
			return fmt.Errorf("snapshot keyed state for checkpoint %d: written twice, or the backend is closed", checkpointID)
		}
		delete(b.pending, snap)
		b.writing.Add(1)
		b.mu.Unlock()
		defer b.writing.Done()
		err := writePebble(w, snap, h, ids)
		if cerr := snap.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("snapshot keyed state: release pebble snapshot: %w", cerr)
		}
		return err
	}, nil
}

func writePebble(w io.Writer, snap *pebble.Snapshot, h *snapHeader, ids []uint16) error {
	it, err := snap.NewIter(nil)
	if err != nil {
		return fmt.Errorf("snapshot keyed state: %w", err)
	}
	defer it.Close()
	sw := newSnapWriter(w, h)
	var lo, hi [4]byte
	var tb timerBatch
	for kg := h.groups.start; kg <= h.groups.end; kg++ {
		// Skip empty key groups with one seek.
		binary.BigEndian.PutUint16(lo[:], uint16(kg))
		it.SetBounds(lo[:2], prefixEnd(lo[:2]))
		if !it.First() {
			continue
		}
		for si, id := range ids {
			binary.BigEndian.PutUint16(lo[2:], id)
			hi = lo
			up := prefixEnd(hi[:])
			it.SetBounds(lo[:], up)
			sk := h.states[si].kind
			if sk == kindTimers {
				if err := writePebbleTimers(it, sw, &tb, kg, si); err != nil {
					return fmt.Errorf("snapshot keyed state %q: %w", h.states[si].name, err)
				}
				continue
			}
			isMap := sk.hasMapKey()
			for valid := it.First(); valid; valid = it.Next() {
				_, _, _, key, rest, err := splitKey(it.Key())
				if err != nil {
					return fmt.Errorf("snapshot keyed state %q: %w", h.states[si].name, err)
				}
				if !isMap && len(rest) > 0 {
					return fmt.Errorf("snapshot keyed state %q: store key %x has trailing bytes", h.states[si].name, it.Key())
				}
				v, err := it.ValueAndErr()
				if err != nil {
					return fmt.Errorf("snapshot keyed state %q: %w", h.states[si].name, err)
				}
				if err := sw.entry(kg, si, key, isMap, rest, v); err != nil {
					return err
				}
			}
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("snapshot keyed state: %w", err)
	}
	return sw.finish()
}

// timerBatch holds one key group's timers of one state while the pebble writer sorts them from the
// store's order (time, key, namespace) into the snapshot's (key, time, namespace): memory for one key
// group's timers, reused across key groups.
type timerBatch struct {
	arena []byte
	ents  []timerEnt
}

type timerEnt struct {
	at, keyEnd, end int // arena[at:keyEnd] is uvarint(len) ‖ key, arena[keyEnd:end] time ‖ namespace
}

// writePebbleTimers writes the timers of state si in key group kg; it is bounded to that range.
func writePebbleTimers(it *pebble.Iterator, sw *snapWriter, tb *timerBatch, kg, si int) error {
	tb.arena, tb.ents = tb.arena[:0], tb.ents[:0]
	for valid := it.First(); valid; valid = it.Next() {
		_, ts, lenKey, _, ns, err := splitTimerKey(it.Key())
		if err != nil {
			return err
		}
		at := len(tb.arena)
		tb.arena = append(tb.arena, lenKey...)
		keyEnd := len(tb.arena)
		tb.arena = appendTimerKey(tb.arena, ts, ns)
		tb.ents = append(tb.ents, timerEnt{at: at, keyEnd: keyEnd, end: len(tb.arena)})
	}
	if err := it.Error(); err != nil {
		return err
	}
	a := tb.arena
	slices.SortFunc(tb.ents, func(x, y timerEnt) int { return bytes.Compare(a[x.at:x.end], a[y.at:y.end]) })
	for _, e := range tb.ents {
		lk := a[e.at:e.keyEnd]
		_, ln := binary.Uvarint(lk)
		if err := sw.entry(kg, si, lk[ln:], true, a[e.keyEnd:e.end], nil); err != nil {
			return err
		}
	}
	return nil
}

// Restore implements KeyedBackend. Entries are written to the store as they are read, in batches; entries
// of states not registered yet are kept under a state id reserved for their name.
func (b *pebbleBackend[K]) Restore(snapshots []io.Reader) error {
	batch := b.db.NewBatch()
	defer func() { _ = batch.Close() }()
	var key []byte
	var now int64 // the clock is read only for TTL states (a task's clock is not needed otherwise)
	if b.ttls > 0 {
		now = b.now()
	}
	var ids []*pebbleState
	{
		err := readSnapshots(snapshots, b.groups, func(h *snapHeader) error {
			ids = ids[:0]
			for _, s := range h.states {
				ps, ok := b.states[s.name]
				if !ok {
					var err error
					if ps, err = b.add(s.name, s.kind, s.flags); err != nil {
						return err
					}
				} else if ps.kind != s.kind {
					return fmt.Errorf("keyed state %q is %s state here but %s state in the snapshot", s.name, ps.kind, s.kind)
				} else if ps.flags != s.flags {
					if ps.registered {
						return flagsMismatch(s.name, ps.flags, s.flags)
					}
					return fmt.Errorf("keyed state %q has flags %#x in one snapshot and %#x in another", s.name, ps.flags, s.flags)
				}
				ids = append(ids, ps)
			}
			return nil
		}, func(e *snapEntry) error {
			ps := ids[e.state]
			if ps.ttl > 0 {
				// An entry that expired since the snapshot is not restored.
				live, keep, err := liveTTL(ps.kind, e.value, ps.ttl, now, e.value[:0:0])
				if err != nil {
					return fmt.Errorf("restore %s state %q: %w", ps.kind, ps.name, err)
				}
				if !keep {
					return nil
				}
				e.value = live
			}
			key = append(key[:0], byte(e.kg>>8), byte(e.kg), byte(ps.id>>8), byte(ps.id))
			if ps.kind == kindTimers {
				// [kg][id][time][uvarint len][key][namespace]: the reader checked the map key's length.
				key = append(key, e.mapKey[:8]...)
				key = binary.AppendUvarint(key, uint64(len(e.key)))
				key = append(key, e.key...)
				key = append(key, e.mapKey[8:]...)
			} else {
				key = binary.AppendUvarint(key, uint64(len(e.key)))
				key = append(key, e.key...)
				key = append(key, e.mapKey...)
			}
			if err := batch.Set(key, e.value, nil); err != nil {
				return err
			}
			if batch.Len() >= restoreBatchBytes {
				if err := batch.Commit(pebble.NoSync); err != nil {
					return err
				}
				batch.Reset()
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := batch.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("restore keyed state: %w", err)
	}
	for _, t := range b.timers {
		if err := t.load(); err != nil {
			return fmt.Errorf("restore keyed state: %w", err)
		}
	}
	return nil
}

// Sweep implements KeyedBackend: it examines the next budget store keys of the owned key groups, in store
// order, from where the previous call stopped, and deletes the expired entries of TTL states (and rewrites
// TTL lists with expired elements). Keys of other states count against the budget too.
func (b *pebbleBackend[K]) Sweep(now int64, budget int) (bool, error) {
	if b.ttls == 0 {
		return false, nil
	}
	lo := []byte{byte(b.groups.start >> 8), byte(b.groups.start)}
	if b.sweepFrom != nil {
		lo = b.sweepFrom
	}
	it, err := b.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd([]byte{byte(b.groups.end >> 8), byte(b.groups.end)})})
	if err != nil {
		return false, fmt.Errorf("keyed state: sweep expired entries: %w", err)
	}
	var live []byte
	valid := it.First()
	for i := 0; valid && i < budget; i, valid = i+1, it.Next() {
		k := it.Key()
		if len(k) < 4 {
			err = fmt.Errorf("store key %x is too short", k)
			break
		}
		id := binary.BigEndian.Uint16(k[2:])
		if int(id) >= len(b.byID) || b.byID[id].ttl == 0 {
			continue
		}
		ps := b.byID[id]
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		out, keep, lerr := liveTTL(ps.kind, v, ps.ttl, now, live[:0])
		if lerr != nil {
			err = fmt.Errorf("state %q: %w", ps.name, lerr)
			break
		}
		switch {
		case !keep:
			err = b.db.Delete(k, pebble.NoSync)
		case len(out) != len(v):
			live = out // the scratch, grown; not the iterator's bytes
			err = b.db.Set(k, live, pebble.NoSync)
		}
		if err != nil {
			break
		}
	}
	if valid && err == nil {
		b.sweepFrom = bytes.Clone(it.Key()) // not into the old one: it is the open iterator's bound
	} else {
		b.sweepFrom = nil
	}
	if cerr := errors.Join(it.Error(), it.Close()); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("keyed state: sweep expired entries: %w", err)
	}
	return valid, nil
}

// Close implements KeyedBackend: it releases unwritten captures, waits for writes in progress, closes the
// store and removes the working directory.
func (b *pebbleBackend[K]) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	var errs []error
	for snap := range b.pending {
		errs = append(errs, snap.Close())
	}
	clear(b.pending)
	b.mu.Unlock()
	b.writing.Wait()
	errs = append(errs, b.db.Close(), os.RemoveAll(b.dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close pebble state backend: %w", err)
	}
	return nil
}

// pebbleValue is a ValueState in pebble: one store key per key, holding the value's encoding.
type pebbleValue[V any] struct {
	pebbleKey
	c   codec.Codec[V]
	buf []byte
	dec V
}

// pebbleKey is what value and list state in pebble share: one store key per key, the key's store key.
type pebbleKey struct {
	st   *pebbleStore
	name string
	id   uint16
}

func (s *pebbleKey) Clear() {
	if k, ok := s.st.keyFor(s.id); ok {
		s.st.check(s.st.db.Delete(k, pebble.NoSync), s.name, "clear")
	}
}

func (s *pebbleValue[V]) Value() (V, bool) {
	k, ok := s.st.keyFor(s.id)
	if !ok {
		var zero V
		return zero, false
	}
	return getValue(s.st, k, s.c, &s.dec, s.name, "decode value")
}

// getValue returns the value stored under key, decoded into *dec (a field of the state, which it leaves
// zero): decoding into a local would make the value escape to the heap on every call.
func getValue[V any](st *pebbleStore, key []byte, c codec.Codec[V], dec *V, name, op string) (V, bool) {
	var zero V
	raw, closer, ok := st.get(key, name)
	if !ok {
		return zero, false
	}
	*dec = zero
	err := c.Decode(raw, dec)
	_ = closer.Close()
	st.check(err, name, op)
	v := *dec
	*dec = zero
	return v, true
}

// getList returns the list stored under key, nil if there is none.
func getList[V any](st *pebbleStore, key []byte, c codec.Codec[V], name string) []V {
	raw, closer, ok := st.get(key, name)
	if !ok {
		return nil
	}
	l, err := decodeList(c, raw, nil)
	_ = closer.Close()
	st.check(err, name, "decode list")
	return l
}

func (s *pebbleValue[V]) Update(v V) {
	k := s.st.mustKeyFor(s.id, s.name, "update")
	var err error
	s.buf, err = s.c.Append(s.buf[:0], v)
	s.st.check(err, s.name, "encode value")
	s.st.check(s.st.db.Set(k, s.buf, pebble.NoSync), s.name, "update")
}

// pebbleList is a ListState in pebble: one store key per key, holding the list encoding, to which Add
// merges (appends) one element.
type pebbleList[V any] struct {
	pebbleKey
	c   codec.Codec[V]
	buf []byte
}

func (s *pebbleList[V]) Get() []V {
	k, ok := s.st.keyFor(s.id)
	if !ok {
		return nil
	}
	return getList(s.st, k, s.c, s.name)
}

func (s *pebbleList[V]) Add(v V) {
	k := s.st.mustKeyFor(s.id, s.name, "add")
	var err error
	s.buf, err = appendElement(s.buf[:0], s.c, v)
	s.st.check(err, s.name, "add")
	s.st.check(s.st.db.Merge(k, s.buf, pebble.NoSync), s.name, "add")
}

func (s *pebbleList[V]) Update(vs []V) {
	k := s.st.mustKeyFor(s.id, s.name, "update")
	if len(vs) == 0 {
		s.st.check(s.st.db.Delete(k, pebble.NoSync), s.name, "update")
		return
	}
	var err error
	s.buf, err = appendList(s.buf[:0], s.c, vs)
	s.st.check(err, s.name, "update")
	s.st.check(s.st.db.Set(k, s.buf, pebble.NoSync), s.name, "update")
}

// pebbleMapKeys is what map and list map state in pebble share: one store key per map key, the key's store
// key followed by the map key's encoding.
type pebbleMapKeys[MK comparable] struct {
	st   *pebbleStore
	name string
	id   uint16
	kc   codec.Codec[MK]
}

// entryKey returns the store key of mk under the current key.
func (s *pebbleMapKeys[MK]) entryKey(mk MK, op string) []byte {
	k := s.st.mustKeyFor(s.id, s.name, op)
	var err error
	s.st.mkey, err = s.kc.Append(append(s.st.mkey[:0], k...), mk)
	s.st.check(err, s.name, "encode map key")
	return s.st.mkey
}

func (s *pebbleMapKeys[MK]) Remove(mk MK) {
	s.st.check(s.st.db.Delete(s.entryKey(mk, "remove"), pebble.NoSync), s.name, "remove")
}

// iter returns an iterator over the current key's entries and the length of their common prefix.
func (s *pebbleMapKeys[MK]) iter(op string) (*pebble.Iterator, int) {
	prefix := bytes.Clone(s.st.mustKeyFor(s.id, s.name, op))
	it, err := s.st.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	s.st.check(err, s.name, op)
	return it, len(prefix)
}

func (s *pebbleMapKeys[MK]) Len() int {
	it, _ := s.iter("len")
	n := 0
	for valid := it.First(); valid; valid = it.Next() {
		n++
	}
	s.st.check(errors.Join(it.Error(), it.Close()), s.name, "len")
	return n
}

// each calls f with the map key and the stored value of each of the current key's entries, until f
// returns false.
func (s *pebbleMapKeys[MK]) each(f func(mk MK, raw []byte) bool) {
	it, n := s.iter("range")
	defer func() { s.st.check(it.Close(), s.name, "range") }()
	for valid := it.First(); valid; valid = it.Next() {
		var mk MK
		s.st.check(s.kc.Decode(it.Key()[n:], &mk), s.name, "decode map key")
		raw, err := it.ValueAndErr()
		s.st.check(err, s.name, "range")
		if !f(mk, raw) {
			return
		}
	}
	s.st.check(it.Error(), s.name, "range")
}

func (s *pebbleMapKeys[MK]) Clear() { s.st.clearPrefix(s.id, s.name) }

// pebbleMap is a MapState in pebble: one store key per map entry, holding the value's encoding.
type pebbleMap[MK comparable, MV any] struct {
	pebbleMapKeys[MK]
	vc  codec.Codec[MV]
	buf []byte
	dec MV
}

func (s *pebbleMap[MK, MV]) Get(mk MK) (MV, bool) {
	return getValue(s.st, s.entryKey(mk, "get"), s.vc, &s.dec, s.name, "decode map value")
}

func (s *pebbleMap[MK, MV]) Put(mk MK, mv MV) {
	k := s.entryKey(mk, "put")
	var err error
	s.buf, err = s.vc.Append(s.buf[:0], mv)
	s.st.check(err, s.name, "encode map value")
	s.st.check(s.st.db.Set(k, s.buf, pebble.NoSync), s.name, "put")
}

func (s *pebbleMap[MK, MV]) Range(f func(MK, MV) bool) {
	s.each(func(mk MK, raw []byte) bool {
		var mv MV
		s.st.check(s.vc.Decode(raw, &mv), s.name, "decode map value")
		return f(mk, mv)
	})
}

// clearPrefix deletes the current key's entries of map-keyed state id, one point delete each. A range
// delete would be one write, but every range tombstone in the memtable is fragmented again by each later
// read until a flush, so that clearing per key (a window's state, say) would slow reads down with every
// clear; the entries of one key are few.
func (st *pebbleStore) clearPrefix(id uint16, name string) {
	k, ok := st.keyFor(id)
	if !ok {
		return
	}
	prefix := bytes.Clone(k)
	it, err := st.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	st.check(err, name, "clear")
	for valid := it.First(); valid; valid = it.Next() {
		st.check(st.db.Delete(it.Key(), pebble.NoSync), name, "clear")
	}
	st.check(errors.Join(it.Error(), it.Close()), name, "clear")
}
