// Package state owns keyed state: the per-key values, lists, maps, list maps and timers that keyed
// operators read and write for the key of the record being processed, the two backends that hold it, and
// the snapshot format that carries it into checkpoints and back.
//
// # Backends
//
// A keyed operator subtask owns one KeyedBackend. It sets the key of each record with SetCurrentKey; the
// state handles (ValueState, ListState, MapState, ListMapState, Timers) then read and write that key's
// state.
//
//   - NewHeap keeps state in memory. Keys are mapped to dense slots once per record (one hash-map lookup);
//     every state is then a slice indexed by slot, so reading or updating a value costs no further lookup and
//     allocates nothing. Values are held as they are, not copied: a value, list or map entry handed to a
//     state must not be mutated afterwards (treat state contents as immutable), or checkpoints may see the
//     mutation.
//   - NewPebble keeps state in a cockroachdb/pebble store in a private working directory, for state larger
//     than memory. Every access encodes the key (and the value) with its codec; keys are laid out as
//     [key group, 2 bytes big-endian][state id, 2 bytes big-endian][uvarint length of the key][key][map key]
//     (the map key only for map and list map state; timers differ, see below), so one key group is one
//     contiguous range and the map entries of one key share one prefix. The length before the key keeps
//     keys that are prefixes of other keys apart. List state is one value per key, and a list map's list
//     one value per map key, appended to with a pebble merge (concatenation), so Add and Append do not read
//     the list. Clearing a map or list map deletes its entries one by one (range tombstones would slow
//     every later read until a flush). Writes use pebble.NoSync with the write-ahead log off: the working
//     directory is scratch space, never reopened; durability comes from checkpoints. A pebble error in a
//     state access panics with an *AccessError (the handles have no error results); the task turns the
//     panic into a failure.
//
// # Freeing heap keys
//
// A heap slot is freed once its key holds no state: each slot counts the list, map and list map tables
// holding state for it plus its timers (and restored entries of states not yet registered); Clear, the
// removal of a map's or list map's last entry, an emptied list and a fired or deleted last timer
// decrement it. Values are not counted but looked up (one flag per value table) when a slot might be
// freed, so that updating a value, the per-record write, does no more than before. Once nothing holds
// the slot, the key leaves
// the slot map and the integer index (deleted by backward shift, without tombstones), the slot's key is
// zeroed and the slot goes on a free list that new keys take first; every table already holds nothing for
// it, since each operation that drops a slot's last state zeroes what the table kept. The current key's
// slot is never freed while it is current, so a function may Clear and then Update the same key: it is
// freed, if still without state, when the next new key needs a slot (which then takes it), so that
// setting a known key checks nothing; a key that is only read never keeps a slot. Snapshots share
// the key and generation slices with their capture, so freeing or reusing a slot copies them first, once
// per snapshot epoch. The snapshot order cache records the generation of each slot it holds; entries of
// freed or reused slots are dropped by the next write, which merges the reused slots in like new keys. So
// memory follows the live keys (Go maps keep their buckets at the peak: flat at the peak of live keys).
// The pebble backend deletes; its memory is its caches and the timers' per-key-group cache.
//
// # Time to live
//
// WithTTL marks a backend so that NewValue, NewList and NewMap on it make states that expire in processing
// time (Options.Now, the task's clock), Flink's state TTL: an entry (a value, each list element, each map
// entry) lives TTL after its last write, or its last read with RefreshOnRead. Each entry is stored with
// its write time (stamped: the heap keeps {value, time} in the table, pebble and snapshots 8 bytes
// big-endian before the encoding; the snapshot header's flags byte marks the state), so TTL survives
// restore and rescale. Expired entries are cleared when read, left out by the snapshot writer and by
// Restore, and swept: Sweep(now, budget) examines budget slots (heap) or store keys (pebble) from where it
// last stopped; each new heap key sweeps 4 slots (so slots follow the keys written within the TTL) and
// each pebble Snapshot 1024 keys. Backends and states without TTL run exactly the code they ran before.
//
// # Timers
//
// NewTimers declares a timers state (kind 4): per key, a set of (time, Namespace) pairs, de-duplicated,
// fired by FireUpTo in time order with their key current. Timers are keyed state, so they are checkpointed,
// restored and rescaled like every other state. On the heap they are a four-ary min-heap of 32-byte entries
// with a position index (a map from timer to a fixed id, and the heap index by id); ties in time fire by
// slot, then namespace. In pebble each timer is one entry [key group][state id][time, 8 bytes][uvarint key
// length][key][namespace, 16 bytes] with an empty value (times and namespaces sign-flipped big-endian, so
// byte order is numeric order), so a key group's timers are one range in time order; in memory only the
// earliest time of each owned key group and a min-heap of key groups by it (Flink's per-key-group priority
// queue cache). FireUpTo seeks the head key group from its earliest live time, past the tombstones of
// fired timers; ties in time fire by key group, then key bytes, then namespace. Register reads before it
// writes, so that Len is exact and re-registering an existing timer (a window's, once per record) writes
// nothing.
//
// # Reserved names
//
// State names that start with NUL (ReservedPrefix) are the engine's: "\x00timers/event",
// "\x00timers/processing", "\x00window/acc", "\x00window/elems", ... Every constructor refuses such a
// name, naming the rule, unless its backend came through Engine, which the operators call and the public
// API does not offer.
//
// # Key groups
//
// Keys are partitioned into MaxParallelism key groups: KeyGroup(encoding of the key) = xxhash64 % max
// parallelism, which is exactly how the network routes a keyed record (graph.KeyGroupOf of the same hash).
// A subtask owns a contiguous range of key groups (KeyGroupRange). Both backends check in SetCurrentKey
// (the heap backend only the first time it sees a key) that the key falls in the subtask's range, and panic
// with an *AccessError wrapping ErrKeyGroupOutOfRange otherwise: a key outside the range means the backend's key codec is not the one
// that routed the record, which would silently break rescaling.
//
// # Snapshots
//
// KeyedBackend.Snapshot runs on the task goroutine and only captures state (heap: copies of the slot tables
// and of the timer heap array, and copy-on-write for lists, maps and list maps; pebble: a pebble snapshot).
// The returned write function serializes the capture on any goroutine, while the task goes on processing
// records; changes made after Snapshot never reach the bytes. Both backends write one canonical format (see
// the snapshot format below), byte for byte equal for equal contents, so a snapshot of either backend
// restores into either. The heap writer groups its copy of the timers by key in linear time (a counting
// sort by slot); the pebble writer sorts each key group's timers (memory: one key group's timers).
//
// Snapshot writes a full snapshot, but the heap writer encodes only what changed: it keeps, per map, list
// map, list and timers state, the bytes it wrote for each key's entries (segments, in the snapshot's key
// order) and copies them into the next snapshot when the key's state has not changed since, which the
// epochs that copy on write keeps per slot tell (segcache.go). A snapshot is byte for byte what encoding
// every key would write. Value and TTL states are encoded every time. The segments cost memory about the
// size of those states' part of the snapshot.
//
// For incremental checkpoints the heap backend also writes delta snapshots (SnapshotIncremental,
// incremental.go): only the keys that changed since its previous write, and deletions of the keys that
// went; Restore takes a full snapshot followed by the deltas built on it, in order (ChainStart finds where
// a chain starts). Both backends restore such chains; only the heap backend writes deltas.
//
// Restore reads one or more snapshots (after a rescale, those of several old subtasks) and keeps the entries
// of the key groups this subtask owns; timers are entries like any other, so rescaling redistributes them
// with no code of their own. States may be registered before or after Restore: entries of a state
// that is not registered yet are kept (heap: as bytes; pebble: under a state id reserved for the name) and
// handed to the state when it is registered, with a check that the kind matches. States
// that are never registered are carried into later snapshots unchanged, so no state is dropped because an
// operator declares it late. The order the task uses is: build the backend, open the operators (they
// register their state in Open, and SealDeclarations ends that), Restore, then process records. A failed Restore leaves the backend in an
// unspecified state: Close it and start over.
//
// # Snapshot format (version 2; version 1 still read)
//
// All fixed-width integers are big-endian.
//
//	magic "RNLKEYED" (8 bytes), version u16 = 2
//	checkpoint id i64, max parallelism u32, key group start u32, key group end u32 (the writer's range)
//	uvarint number of states, then per state: uvarint name length, name, kind byte (1 value, 2 list, 3 map,
//	  4 timers, 5 list map), flags byte (bit 0: the state has a time to live, value, list and map state
//	  only; a reader refuses flags it does not know); states are sorted by name
//	CRC-32C (Castagnoli) u32 of the header so far, so that a damaged header is never interpreted
//	entries, each: byte 1, key group u16, uvarint state index, uvarint key length, key,
//	  [map, timers and list map state only: uvarint map key length, map key], uvarint value length, value
//	byte 0, uvarint number of entries
//	CRC-32C u32 of every byte above (the header's checksum included)
//
// Keys, map keys and values are their codecs' encodings (of a TTL state: the write time, 8 bytes
// big-endian epoch ms, then the encoding, per value, list element and map value); a list value (of list state, and of each list of
// a list map) is its elements' encodings, each preceded by its uvarint length. A timer is an entry whose
// map key is its time, namespace A and namespace B, 8 bytes each, sign-flipped (x XOR 1<<63) so that byte
// order is numeric order, and whose value is empty. Entries are sorted by key group, then state index,
// then the bytes uvarint(key length) ‖ key ‖ map key (so a key's timers come in time order). A reader
// checks the magic, version, order, lengths, that each entry's key group is the hash of its key, that a
// timer's map key is 24 bytes and its value empty, the count and the checksum; any failure is an error
// wrapping ErrCorruptSnapshot (truncation wraps io.ErrUnexpectedEOF as well).
//
// Version 1 is version 2 without the flags byte and with kinds 1 to 3 only; it is still read, and a
// restored backend writes version 2.
//
// Version 3 is a delta snapshot: version 2 with the id of the checkpoint it builds on (i64) after the
// checkpoint id, a mode byte after each state's flags (0: written whole, replacing earlier snapshots'
// entries of the state; 1: only changed keys, whose entries replace theirs), and, after the entries and
// before byte 0, the deletions: byte 2, key group u16, uvarint state index (a mode-1 state), uvarint key
// length, key, in the order of entries; the count in the trailer counts them too.
//
// # What it must not touch
//
// The package knows nothing of tasks, networks, graphs, operators, the job master or the public API; it
// imports only the codec package from Runnel (a test holds it to that). Whoever builds a backend passes in
// the key group range and maximum parallelism.
package state

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-dev/runnel/codec"
)

// ValueState holds one value per key.
type ValueState[V any] interface {
	// Value returns the value for the current key and whether one is set.
	Value() (V, bool)
	// Update sets the value for the current key.
	Update(v V)
	// Clear removes the value for the current key.
	Clear()
}

// ListState holds a list of values per key.
type ListState[V any] interface {
	// Get returns the list for the current key; the slice is owned by the state and valid until the next
	// change.
	Get() []V
	// Add appends v to the current key's list.
	Add(v V)
	// Update replaces the current key's list with a copy of vs.
	Update(vs []V)
	// Clear empties the current key's list.
	Clear()
}

// MapState holds a map per key.
type MapState[MK comparable, MV any] interface {
	// Get returns the value under mk for the current key.
	Get(mk MK) (MV, bool)
	// Put sets mk to mv for the current key.
	Put(mk MK, mv MV)
	// Remove deletes mk for the current key.
	Remove(mk MK)
	// Len returns the number of entries for the current key.
	Len() int
	// Range calls f for each entry of the current key until f returns false.
	Range(f func(MK, MV) bool)
	// Clear removes all entries of the current key.
	Clear()
}

// Backend is the non-generic face of a keyed backend: what the state constructors (NewValue, NewList,
// NewMap) take. Only this package implements it.
type Backend interface {
	// store returns the backend's non-generic store: *heapStore or *pebbleStore.
	store() any
}

// KeyedBackend holds the keyed state of one operator subtask. It is used from the task goroutine only,
// except for the write function that Snapshot returns.
type KeyedBackend[K comparable] interface {
	Backend
	// SetCurrentKey makes k the key that state handles read and write. It is called once per record: the
	// heap backend allocates nothing here once k has been seen.
	SetCurrentKey(k K)
	// CurrentKey returns the current key (the zero K before the first SetCurrentKey).
	CurrentKey() K
	// ForEachKey makes each key that has state in a registered state current in turn and calls f, stopping
	// at f's first error; the previous current key is current again afterwards. f may read and change
	// state. The order is unspecified.
	ForEachKey(f func(k K) error) error
	// Snapshot captures the state for checkpoint checkpointID. It runs on the task goroutine and is quick;
	// the returned write function serializes the capture in the snapshot format and may run on another
	// goroutine, concurrently with further records. Call write once; a pebble capture holds a pebble
	// snapshot until write returns or the backend is closed.
	Snapshot(checkpointID int64) (write func(w io.Writer) error, err error)
	// SealDeclarations ends the phase in which states may be declared (an operator's Open): a state
	// constructor called afterwards (from ProcessElement, say) fails with an error wrapping
	// ErrDeclaredAfterOpen that names the state and the operator. Declaring state per record would
	// register it again at every record, and a state first declared late would miss its restored entries'
	// checks until then.
	SealDeclarations()
	// Restore loads the state in snapshots written by Snapshot of either backend, keeping only entries of
	// key groups in this backend's range. See the package doc for the order of Restore and registration.
	Restore(snapshots []io.Reader) error
	// Sweep clears expired entries of the TTL states (WithTTL) as of now (epoch ms), examining at most
	// budget slots (heap) or store keys (pebble) and resuming where the previous call stopped; it reports
	// whether it stopped before the end of the slots or keys (after the end, the next call starts over at
	// the beginning). The operator calls it on a processing-time deadline, so that expired state that is
	// never read again is freed; besides, each new heap key sweeps a few slots and each pebble Snapshot
	// 1024 keys. A backend without TTL states returns at once. The error is a pebble failure.
	Sweep(now int64, budget int) (more bool, err error)
	// Close releases the backend; the pebble backend closes its store and removes its working directory,
	// after waiting for snapshot writes in progress. The backend must not be used afterwards.
	Close() error
}

// Options configure a keyed backend.
type Options[K comparable] struct {
	// KeyCodec encodes keys for key groups, snapshots and the pebble store. It must be the codec whose
	// encoding the network hashes to route records to this subtask. Nil means codec.For[K]().
	KeyCodec codec.Codec[K]
	// MaxParallelism is the number of key groups, 1 to MaxKeyGroups.
	MaxParallelism int
	// KeyGroupStart and KeyGroupEnd are the inclusive range of key groups this subtask owns (KeyGroupRange
	// computes it).
	KeyGroupStart, KeyGroupEnd int
	// Owner names the operator that owns the backend, for error messages; empty for none.
	Owner string
	// Now is the task's processing-time clock in epoch ms, which TTL states (WithTTL) expire by; nil means
	// the system clock.
	Now func() int64
	// Dir is where the pebble backend makes its working directory (a fresh directory inside Dir, removed by
	// Close); empty means the system's temporary directory. The heap backend ignores it.
	Dir string
}

// MaxKeyGroups is the largest MaxParallelism a backend accepts: key groups are stored in two bytes.
const MaxKeyGroups = 1 << 16

// errNoCurrentKey is the cause of an *AccessError of a state used before the first SetCurrentKey.
var errNoCurrentKey = errors.New("no current key")

// ErrCorruptSnapshot is wrapped by every error Restore returns for a snapshot whose bytes are damaged or
// cut short.
var ErrCorruptSnapshot = errors.New("state: corrupt snapshot")

// ErrDeclaredAfterOpen is wrapped by the error a state constructor returns after SealDeclarations: keyed
// state is declared in a keyed function's Open, not while it processes records.
var ErrDeclaredAfterOpen = errors.New("keyed state must be declared in Open")

// declarations is the part of a backend that decides whether a state may be declared now: before
// SealDeclarations, and once per name.
type declarations struct {
	owner  string
	sealed bool
}

// SealDeclarations implements KeyedBackend for both backends.
func (d *declarations) SealDeclarations() { d.sealed = true }

// in returns ` in operator "name"` for messages, or "" when the owner is unknown.
func (d *declarations) in() string {
	if d.owner == "" {
		return ""
	}
	return fmt.Sprintf(" in operator %q", d.owner)
}

// checkDeclare returns the error for declaring state name of kind k now, or nil.
func (d *declarations) checkDeclare(k kind, name string, declared bool) error {
	switch {
	case d.sealed:
		return fmt.Errorf("%s state %q declared%s after Open (in ProcessElement or later): %w; "+
			"declare it once in Open, keep the handle in a field, and use it while processing records",
			k, name, d.in(), ErrDeclaredAfterOpen)
	case declared:
		return fmt.Errorf("keyed state %q is declared twice%s: every state needs a name of its own", name, d.in())
	}
	return nil
}

// ErrKeyGroupOutOfRange is wrapped by the *AccessError a backend panics with when a key's key group is
// outside the backend's range.
var ErrKeyGroupOutOfRange = errors.New("key group outside this subtask's range")

// AccessError is the panic value of a state access that cannot be carried out: a pebble read or write that
// failed, stored bytes that do not decode, a key that fails to encode or belongs to another subtask. State
// handles have no error results, so such failures unwind the record's processing; the task reports them as
// the failure of the subtask.
type AccessError struct {
	State string // the state's name; empty for a failure outside any state (setting the current key)
	Op    string // what failed, e.g. "get", "update", "set current key"
	Err   error
}

func (e *AccessError) Error() string {
	if e.State == "" {
		return fmt.Sprintf("keyed state: %s: %v", e.Op, e.Err)
	}
	return fmt.Sprintf("keyed state %q: %s: %v", e.State, e.Op, e.Err)
}

func (e *AccessError) Unwrap() error { return e.Err }

// KeyGroup returns the key group of a key from its codec encoding: xxhash64 of the encoding modulo
// maxParallelism. It is the same function the network uses to route keyed records
// (graph.KeyGroupOf(xxhash.Sum64(encodedKey), maxParallelism)); the two must never diverge.
func KeyGroup(encodedKey []byte, maxParallelism int) int {
	return int(xxhash.Sum64(encodedKey) % uint64(maxParallelism))
}

// KeyGroupRange returns the inclusive range of key groups that subtask (0-based) of an operator with
// parallelism subtasks owns: the key groups kg with kg*parallelism/maxParallelism == subtask, which is
// graph.OperatorIndexOf's assignment (Flink's contiguous ranges).
func KeyGroupRange(maxParallelism, parallelism, subtask int) (start, end int) {
	start = (subtask*maxParallelism + parallelism - 1) / parallelism
	end = ((subtask+1)*maxParallelism+parallelism-1)/parallelism - 1
	return start, end
}

// keyGroups is the non-generic part of the options, validated.
type keyGroups struct {
	maxP, start, end int
}

func (g keyGroups) owns(kg int) bool { return kg >= g.start && kg <= g.end }

func (o *Options[K]) validate() (codec.Codec[K], keyGroups, error) {
	g := keyGroups{maxP: o.MaxParallelism, start: o.KeyGroupStart, end: o.KeyGroupEnd}
	if g.maxP < 1 || g.maxP > MaxKeyGroups {
		return nil, g, fmt.Errorf("keyed state backend: MaxParallelism %d is outside [1, %d]", g.maxP, MaxKeyGroups)
	}
	if g.start < 0 || g.start > g.end || g.end >= g.maxP {
		return nil, g, fmt.Errorf("keyed state backend: key group range [%d, %d] is not within [0, %d] (MaxParallelism %d)",
			g.start, g.end, g.maxP-1, g.maxP)
	}
	kc := o.KeyCodec
	if kc == nil {
		var err error
		if kc, err = codec.For[K](); err != nil {
			return nil, g, fmt.Errorf("keyed state backend: no codec for key type %s (set Options.KeyCodec): %w",
				reflect.TypeFor[K](), err)
		}
	}
	return kc, g, nil
}

// kind says which handle a state is.
type kind uint8

const (
	kindValue   kind = 1
	kindList    kind = 2
	kindMap     kind = 3
	kindTimers  kind = 4 // format version 2
	kindListMap kind = 5 // format version 2

	maxKindV1 = kindMap
	maxKind   = kindListMap
)

func (k kind) String() string {
	switch k {
	case kindValue:
		return "value"
	case kindList:
		return "list"
	case kindMap:
		return "map"
	case kindTimers:
		return "timers"
	case kindListMap:
		return "list map"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// hasMapKey reports whether entries of the kind carry a map key (in snapshots and pebble store keys).
func (k kind) hasMapKey() bool { return k == kindMap || k == kindTimers || k == kindListMap }

// ReservedPrefix starts the names of the engine's own states ("\x00timers/event", "\x00window/acc", ...).
// A state constructor refuses such a name unless its backend came through Engine, so that no user state
// can collide with the engine's.
const ReservedPrefix = "\x00"

// Engine returns b for declaring the engine's own states, whose names start with ReservedPrefix. The
// operators call it; the public API hands users the backend itself, so user code cannot declare a reserved
// name. Engine(nil) is nil.
func Engine(b Backend) Backend {
	if b == nil {
		return nil
	}
	if e, ok := b.(engineBackend); ok {
		return e
	}
	return engineBackend{b: b}
}

// engineBackend marks a backend as the engine's: see Engine.
type engineBackend struct{ b Backend }

func (e engineBackend) store() any { return e.b.store() }

// storeOf returns b's store for declaring state name of kind k, refusing a reserved name unless b came
// through Engine. It also returns the backend under the Engine wrapper.
func storeOf(b Backend, k kind, name string) (any, Backend, error) {
	if b == nil {
		return nil, nil, noBackend(k, name)
	}
	engine := false
	for {
		switch w := b.(type) {
		case engineBackend:
			b, engine = w.b, true
			continue
		case ttlBackend:
			b = w.b
			continue
		}
		break
	}
	if strings.HasPrefix(name, ReservedPrefix) && !engine {
		return nil, nil, fmt.Errorf("%s state %q: names starting with NUL (\\x00) are reserved for the engine's own state "+
			"(timers, window contents); give the state a name that does not start with NUL", k, name)
	}
	return b.store(), b, nil
}

// codecOr returns c, or codec.For[T]() when c is nil; the error names the state and the type.
func codecOr[T any](c codec.Codec[T], k kind, name, what string) (codec.Codec[T], error) {
	if c != nil {
		return c, nil
	}
	c, err := codec.For[T]()
	if err != nil {
		return nil, fmt.Errorf("%s state %q: no codec for %s type %s (pass one to the constructor): %w",
			k, name, what, reflect.TypeFor[T](), err)
	}
	return c, nil
}

func noBackend(k kind, name string) error {
	return fmt.Errorf("%s state %q: keyed state is only available on a keyed stream (after KeyBy)", k, name)
}

// NewValue registers a value state named name. A nil codec means codec.For[V]().
func NewValue[V any](b Backend, name string, c codec.Codec[V]) (ValueState[V], error) {
	store, _, err := storeOf(b, kindValue, name)
	if err != nil {
		return nil, err
	}
	if c, err = codecOr(c, kindValue, name, "value"); err != nil {
		return nil, err
	}
	if ttl, ok := ttlOf(b); ok {
		return newTTLValue(store, name, c, ttl)
	}
	switch st := store.(type) {
	case *heapStore:
		s := &heapValue[V]{st: st, name: name, c: c}
		if err := st.register(name, s); err != nil {
			return nil, err
		}
		return s, nil
	case *pebbleStore:
		id, err := st.register(name, kindValue)
		if err != nil {
			return nil, err
		}
		return &pebbleValue[V]{pebbleKey: pebbleKey{st: st, name: name, id: id}, c: c}, nil
	}
	return nil, fmt.Errorf("value state %q: unknown backend %T", name, b)
}

// NewList registers a list state named name. A nil codec means codec.For[V]().
func NewList[V any](b Backend, name string, c codec.Codec[V]) (ListState[V], error) {
	store, _, err := storeOf(b, kindList, name)
	if err != nil {
		return nil, err
	}
	if c, err = codecOr(c, kindList, name, "element"); err != nil {
		return nil, err
	}
	if ttl, ok := ttlOf(b); ok {
		return newTTLList(store, name, c, ttl)
	}
	switch st := store.(type) {
	case *heapStore:
		s := &heapList[V]{st: st, name: name, c: c}
		if err := st.register(name, s); err != nil {
			return nil, err
		}
		return s, nil
	case *pebbleStore:
		id, err := st.register(name, kindList)
		if err != nil {
			return nil, err
		}
		return &pebbleList[V]{pebbleKey: pebbleKey{st: st, name: name, id: id}, c: c}, nil
	}
	return nil, fmt.Errorf("list state %q: unknown backend %T", name, b)
}

// NewMap registers a map state named name. Nil codecs mean codec.For of the map key and value types.
func NewMap[MK comparable, MV any](b Backend, name string, mk codec.Codec[MK], mv codec.Codec[MV]) (MapState[MK, MV], error) {
	store, _, err := storeOf(b, kindMap, name)
	if err != nil {
		return nil, err
	}
	if mk, err = codecOr(mk, kindMap, name, "map key"); err != nil {
		return nil, err
	}
	if mv, err = codecOr(mv, kindMap, name, "map value"); err != nil {
		return nil, err
	}
	if ttl, ok := ttlOf(b); ok {
		return newTTLMap(store, name, mk, mv, ttl)
	}
	switch st := store.(type) {
	case *heapStore:
		s := newHeapMap(st, name, mk, mv)
		if err := st.register(name, s); err != nil {
			return nil, err
		}
		return s, nil
	case *pebbleStore:
		id, err := st.register(name, kindMap)
		if err != nil {
			return nil, err
		}
		return &pebbleMap[MK, MV]{pebbleMapKeys: pebbleMapKeys[MK]{st: st, name: name, id: id, kc: mk}, vc: mv}, nil
	}
	return nil, fmt.Errorf("map state %q: unknown backend %T", name, b)
}

// Reducer folds records into a value state keyed by the record's key: the per-record step of a keyed
// reduce. It has the effect of b.SetCurrentKey(k) followed by reading, combining and updating v, in one
// call; the heap backend does it without going through the interfaces three times.
type Reducer[K comparable, V any] interface {
	// Reduce makes k current and stores fn(old, x), or x when k has no value yet; it returns what it
	// stored. An error of fn leaves the value unchanged.
	Reduce(k K, x V, fn func(acc, x V) (V, error)) (V, error)
	// ReduceAll reduces xs[i] under keys[i], in order, and appends what it stored to out. At an error of
	// fn it stops and returns out with the results before it.
	ReduceAll(keys []K, xs []V, fn func(acc, x V) (V, error), out []V) ([]V, error)
}

// NewReducer returns the Reducer of value state v on backend b (v must have been made on b).
func NewReducer[K comparable, V any](b KeyedBackend[K], v ValueState[V]) Reducer[K, V] {
	if hb, ok := b.(*heapBackend[K]); ok {
		if hv, ok := v.(*heapValue[V]); ok && hv.st == &hb.heapStore {
			return &heapReducer[K, V]{b: hb, v: hv}
		}
	}
	return &genericReducer[K, V]{b: b, v: v}
}

type genericReducer[K comparable, V any] struct {
	b KeyedBackend[K]
	v ValueState[V]
}

func (r *genericReducer[K, V]) Reduce(k K, x V, fn func(acc, x V) (V, error)) (V, error) {
	r.b.SetCurrentKey(k)
	if acc, ok := r.v.Value(); ok {
		var err error
		if x, err = fn(acc, x); err != nil {
			return x, err
		}
	}
	r.v.Update(x)
	return x, nil
}

func (r *genericReducer[K, V]) ReduceAll(keys []K, xs []V, fn func(acc, x V) (V, error), out []V) ([]V, error) {
	for i, x := range xs {
		v, err := r.Reduce(keys[i], x, fn)
		if err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, nil
}

type heapReducer[K comparable, V any] struct {
	b *heapBackend[K]
	v *heapValue[V]
}

func (r *heapReducer[K, V]) Reduce(k K, x V, fn func(acc, x V) (V, error)) (V, error) {
	r.b.SetCurrentKey(k)
	return r.v.fold(int(r.b.cur), x, fn)
}

func (r *heapReducer[K, V]) ReduceAll(keys []K, xs []V, fn func(acc, x V) (V, error), out []V) ([]V, error) {
	b, v := r.b, r.v
	keys = keys[:len(xs)]
	for i, x := range xs {
		b.SetCurrentKey(keys[i])
		x, err := v.fold(int(b.cur), x, fn)
		if err != nil {
			return out, err
		}
		out = append(out, x)
	}
	return out, nil
}
