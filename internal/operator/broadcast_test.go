package operator

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/codec"
)

// rangeFunc is the broadcast process function of the Range test. A rule "put:K" puts K, "del:K" removes
// it, "range" emits the keys Range visits, and "prune" ranges removing, at each key, the key after it and
// putting a key after all others. A keyed record emits the keys its read-only view visits.
type rangeFunc struct{ next map[string]string }

func (*rangeFunc) Open(KeyedContext[string]) error { return nil }
func (*rangeFunc) Close() error                    { return nil }

func visited(s ReadOnlyBroadcastState[string, int64]) string {
	var ks []string
	s.Range(func(k string, _ int64) bool { ks = append(ks, k); return true })
	return strings.Join(ks, ",")
}

func (*rangeFunc) ProcessElement(ctx KeyedBroadcastContext[string, string, int64], _ string, out Collector[string]) error {
	out.Collect(visited(ctx.State()))
	return nil
}

func (f *rangeFunc) ProcessBroadcastElement(ctx BroadcastContext[string, string, int64], r string, out Collector[string]) error {
	st := ctx.State()
	switch {
	case strings.HasPrefix(r, "put:"):
		st.Put(r[4:], int64(len(r)))
	case strings.HasPrefix(r, "del:"):
		st.Remove(r[4:])
	case r == "range":
		out.Collect(visited(st))
	case r == "prune":
		var ks []string
		st.Range(func(k string, _ int64) bool {
			ks = append(ks, k)
			st.Remove(f.next[k])
			st.Put("~new", 0)
			return true
		})
		out.Collect(strings.Join(ks, ","))
	}
	return nil
}

// stringLog records what an untimed operator emits.
type stringLog struct{ got []string }

func (l *stringLog) Collect(v string) { l.got = append(l.got, v) }
func (l *stringLog) CollectBatch(vs []string) {
	for _, v := range vs {
		l.Collect(v)
	}
}

// TestBroadcastStateRangeInKeyOrder holds Range to its documentation: every call visits the keys in the
// order of their encodings, which for the built-in string codec (the string's bytes) is the order sort.Strings
// gives, on the writable state and on the read-only view, after puts and removes in random order and after
// a restore from a snapshot. During a Range that removes the key after the current one and puts a new one,
// it visits every other key of those it began with, and not the new key.
func TestBroadcastStateRangeInKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	keys := make([]string, 300)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%x", rng.Uint64()%1_000_000)
	}
	f := &rangeFunc{}
	spec := &BroadcastSpec[string, string, string, string, int64, string]{
		Key: func(v string) string { return v }, KeyCodec: codec.String(), MapKey: codec.String(), MapValue: codec.Int64(),
		New: func() KeyedBroadcastProcessFunction[string, string, string, string, int64, string] { return f },
	}
	build := func() (Built, *stringLog) {
		t.Helper()
		log := &stringLog{}
		b, err := spec.Build(windowTestContext("memory"), []any{Collector[string](log)})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Open(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		})
		return b, log
	}
	b, log := build()
	rules, records := b.Input2.(Collector[string]), b.Input.(Collector[string])
	live := map[string]bool{}
	for _, i := range rng.Perm(len(keys)) {
		rules.Collect("put:" + keys[i])
		live[keys[i]] = true
		if rng.IntN(4) == 0 {
			k := keys[rng.IntN(len(keys))]
			rules.Collect("del:" + k)
			delete(live, k)
		}
	}
	var want []string
	for k := range live {
		want = append(want, k)
	}
	sort.Strings(want)
	check := func(what string, got []string) {
		t.Helper()
		for i, g := range got {
			if g != strings.Join(want, ",") {
				t.Fatalf("%s, call %d: Range visited %d keys not in key order: %.200s…", what, i, strings.Count(g, ",")+1, g)
			}
		}
	}
	for range 5 {
		rules.Collect("range")
		records.Collect("x")
	}
	check("after puts and removes", log.got)

	snap, err := b.Snapshot(1)
	if err != nil {
		t.Fatal(err)
	}
	var data bytes.Buffer
	if err := snap(&data); err != nil {
		t.Fatal(err)
	}
	restored, rlog := build()
	if err := restored.Restore(data.Bytes()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		restored.Input2.(Collector[string]).Collect("range")
		restored.Input.(Collector[string]).Collect("x")
	}
	check("restored", rlog.got)

	f.next = map[string]string{}
	for i := 0; i+1 < len(want); i++ {
		f.next[want[i]] = want[i+1]
	}
	log.got = nil
	rules.Collect("prune")
	var every []string
	for i := 0; i < len(want); i += 2 {
		every = append(every, want[i])
	}
	if got := log.got[0]; got != strings.Join(every, ",") {
		t.Fatalf("a Range that removes the next key visited %.200s…, want every other key in order", got)
	}
	want = append(every, "~new")
	log.got = nil
	rules.Collect("range")
	records.Collect("x")
	check("after the pruning Range", log.got)
}
