package state

import (
	"sort"
	"testing"
)

func TestKeyedStateIsolatesKeys(t *testing.T) {
	b := NewKeyed[string]()
	v, err := NewValue[int](b, "count")
	if err != nil {
		t.Fatal(err)
	}
	l, _ := NewList[string](b, "seen")
	m, _ := NewMap[string, int](b, "m")
	if _, err := NewValue[int](b, "count"); err == nil {
		t.Fatal("duplicate state name accepted")
	}
	for _, k := range []string{"a", "b", "a", "c", "a"} {
		b.SetCurrentKey(k)
		n, _ := v.Value()
		v.Update(n + 1)
		l.Add(k)
		m.Put(k, n+1)
	}
	want := map[string]int{"a": 3, "b": 1, "c": 1}
	for k, w := range want {
		b.SetCurrentKey(k)
		if got, ok := v.Value(); !ok || got != w {
			t.Errorf("value[%s] = %d,%v want %d", k, got, ok, w)
		}
		if got := len(l.Get()); got != w {
			t.Errorf("list[%s] has %d", k, got)
		}
		if got, _ := m.Get(k); got != w || m.Len() != 1 {
			t.Errorf("map[%s] = %d (len %d)", k, got, m.Len())
		}
	}
	b.SetCurrentKey("b")
	v.Clear()
	l.Clear()
	m.Clear()
	var keys []string
	if err := b.ForEachKey(func(k string) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	if len(keys) != 2 || keys[0] != "a" || keys[1] != "c" {
		t.Fatalf("keys with state = %v", keys)
	}
	if _, err := NewValue[int](nil, "x"); err == nil {
		t.Fatal("state without keyed backend accepted")
	}
}

func TestValueStateAllocatesNothingPerRecord(t *testing.T) {
	b := NewKeyed[int64]()
	v, _ := NewValue[int64](b, "sum")
	for k := int64(0); k < 100; k++ {
		b.SetCurrentKey(k)
		v.Update(0)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		for k := int64(0); k < 100; k++ {
			b.SetCurrentKey(k)
			n, _ := v.Value()
			v.Update(n + k)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocs per run", allocs)
	}
}
