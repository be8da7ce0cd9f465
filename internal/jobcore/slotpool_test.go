package jobcore

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// poolStep is one call (or a few, made without taking the grants in between) on a pool, and what must
// follow: the grants, what the calls returned, the free slots and what jobs still wait for.
type poolStep struct {
	do      func(p *SlotPool[string]) string
	grants  string // formatGrants of Grants() after the step
	out     string // what do returned
	free    int
	waiting map[string]int
}

// add registers TaskManager tm-id with slots slots.
func add(id TaskManagerID, slots int) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string {
		if err := p.AddTaskManager(id, fmt.Sprintf("tm-%d", id), fmt.Sprintf("127.0.0.1:%d", 7000+id), slots); err != nil {
			return err.Error()
		}
		return ""
	}
}

// take takes a slot of TaskManager tm-id for job at once: "tm-ID/N", or "none".
func take(job string, id TaskManagerID) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string {
		s, ok := p.Take(job, id)
		if !ok {
			return "none"
		}
		return fmt.Sprintf("%s/%d", s.Name, s.Number)
	}
}

func request(job string, n int) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string { p.Request(job, n); return "" }
}

// release gives back slots written "tm/number" (the names tm-N the tests register).
func release(job string, slots ...string) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string {
		var ss []Slot
		for _, s := range slots {
			var id TaskManagerID
			var n int
			if _, err := fmt.Sscanf(s, "%d/%d", &id, &n); err != nil {
				panic(err)
			}
			ss = append(ss, Slot{TaskManager: id, Name: fmt.Sprintf("tm-%d", id), Number: n})
		}
		p.Release(job, ss)
		return ""
	}
}

func remove(id TaskManagerID) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string { return fmt.Sprint(p.RemoveTaskManager(id)) }
}

func exclude(job string, id TaskManagerID) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string { p.Exclude(job, id); return "" }
}

func forget(job string) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string { p.ForgetJob(job); return "" }
}

// seq makes several calls one step: their grants are taken together, their outputs joined by "; ".
func seq(calls ...func(p *SlotPool[string]) string) func(p *SlotPool[string]) string {
	return func(p *SlotPool[string]) string {
		var out []string
		for _, c := range calls {
			if o := c(p); o != "" {
				out = append(out, o)
			}
		}
		return strings.Join(out, "; ")
	}
}

// formatGrants writes grants as "a: tm-1/0 tm-2/0; b: tm-1/1", checking that every slot carries its
// TaskManager's name and data address.
func formatGrants(t *testing.T, gs []Grant[string]) string {
	t.Helper()
	var parts []string
	for _, g := range gs {
		var b strings.Builder
		b.WriteString(g.Job + ":")
		for _, s := range g.Slots {
			if s.Name != fmt.Sprintf("tm-%d", s.TaskManager) || s.DataAddress != fmt.Sprintf("127.0.0.1:%d", 7000+s.TaskManager) {
				t.Errorf("slot %+v does not carry its TaskManager's name and data address", s)
			}
			fmt.Fprintf(&b, " %s/%d", s.Name, s.Number)
		}
		parts = append(parts, b.String())
	}
	return strings.Join(parts, "; ")
}

func TestSlotPool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []poolStep
	}{
		{"one job over equal TaskManagers takes one slot of each per round", []poolStep{
			{do: seq(add(1, 2), add(2, 2), add(3, 2)), free: 6},
			{do: request("a", 6), grants: "a: tm-1/0 tm-2/0 tm-3/0 tm-1/1 tm-2/1 tm-3/1", free: 0},
		}},
		{"TaskManagers with more free slots come first in a round", []poolStep{
			{do: seq(add(1, 1), add(2, 3)), free: 4},
			{do: request("a", 4), grants: "a: tm-2/0 tm-1/0 tm-2/1 tm-2/2", free: 0},
		}},
		{"a request beyond the free slots is granted in part and waits for the rest", []poolStep{
			{do: add(1, 2), free: 2},
			{do: request("a", 3), grants: "a: tm-1/0 tm-1/1", free: 0, waiting: map[string]int{"a": 1}},
			{do: add(2, 1), grants: "a: tm-2/0", free: 0, waiting: map[string]int{"a": 0}},
		}},
		{"requests wait before any TaskManager registers", []poolStep{
			{do: seq(request("a", 2), request("a", 1)), waiting: map[string]int{"a": 3}},
			{do: add(1, 4), grants: "a: tm-1/0 tm-1/1 tm-1/2", free: 1, waiting: map[string]int{"a": 0}},
		}},
		{"a TaskManager that joins grants the waiting requests in their order", []poolStep{
			{do: add(1, 1), free: 1},
			{do: request("a", 2), grants: "a: tm-1/0", waiting: map[string]int{"a": 1}},
			{do: seq(request("b", 2), request("a", 1)), waiting: map[string]int{"a": 2, "b": 2}},
			// a's first request, then b's; a's second, made after b's, waits.
			{do: add(2, 3), grants: "a: tm-2/0; b: tm-2/1 tm-2/2", waiting: map[string]int{"a": 1, "b": 0}},
			{do: add(3, 2), grants: "a: tm-3/0", free: 1, waiting: map[string]int{"a": 0}},
		}},
		{"released slots return and go to the oldest waiting request", []poolStep{
			{do: add(1, 2), free: 2},
			{do: request("a", 2), grants: "a: tm-1/0 tm-1/1"},
			{do: seq(request("b", 1), request("c", 1)), waiting: map[string]int{"b": 1, "c": 1}},
			{do: release("a", "1/1"), grants: "b: tm-1/1", waiting: map[string]int{"b": 0, "c": 1}},
			{do: release("a", "1/0"), grants: "c: tm-1/0", waiting: map[string]int{"c": 0}},
			{do: release("b", "1/1", "1/0"), free: 1}, // 1/0 is c's: ignored
			{do: release("c", "1/0", "1/0", "1/7", "9/0"), free: 2},
		}},
		{"Take gives a slot of one TaskManager at once, ahead of a waiting request", []poolStep{
			{do: seq(add(1, 1), add(2, 2)), free: 3},
			{do: request("a", 4), grants: "a: tm-2/0 tm-1/0 tm-2/1", free: 0, waiting: map[string]int{"a": 1}},
			{do: release("a", "2/1"), grants: "a: tm-2/1", free: 0, waiting: map[string]int{"a": 0}},
			{do: seq(release("a", "2/1"), take("b", 2), take("b", 2), take("b", 9)), out: "tm-2/1; none; none", free: 0},
			{do: release("b", "2/1"), free: 1},
		}},
		{"a removed TaskManager's slots vanish and a later Release of them is ignored", []poolStep{
			{do: seq(add(1, 1), add(2, 2)), free: 3},
			{do: seq(request("a", 2), request("b", 1)), grants: "a: tm-2/0 tm-1/0; b: tm-2/1"},
			{do: remove(2), out: "[a b]", free: 0},
			{do: release("a", "2/0", "1/0"), free: 1},
			{do: remove(2), out: "[]", free: 1},
			// tm-2 registers again: a new id, new slots.
			{do: add(3, 2), free: 3},
			{do: request("a", 1), grants: "a: tm-3/0", free: 2},
		}},
		{"removing a TaskManager asks again for its slots granted but not handed out", []poolStep{
			{do: seq(add(1, 1), add(2, 1), request("a", 2), request("b", 1), remove(2)), grants: "a: tm-1/0", out: "[]",
				waiting: map[string]int{"a": 1, "b": 1}},
			// a asked first and keeps its place ahead of b.
			{do: add(3, 1), grants: "a: tm-3/0", waiting: map[string]int{"a": 0, "b": 1}},
		}},
		{"an excluded TaskManager is never granted to the job again, and holds no other job back", []poolStep{
			{do: seq(add(1, 1), add(2, 1)), free: 2},
			{do: request("a", 1), grants: "a: tm-1/0", free: 1},
			// a keeps the slot it holds until it gives it back.
			{do: exclude("a", 1), free: 1},
			{do: release("a", "1/0"), free: 2},
			{do: request("a", 2), grants: "a: tm-2/0", free: 1, waiting: map[string]int{"a": 1}},
			{do: request("b", 1), grants: "b: tm-1/0", free: 0, waiting: map[string]int{"a": 1, "b": 0}},
			{do: add(3, 1), grants: "a: tm-3/0", waiting: map[string]int{"a": 0}},
		}},
		{"excluding takes back the TaskManager's slots granted but not handed out", []poolStep{
			{do: seq(add(1, 1), add(2, 1), request("a", 2), exclude("a", 2)), grants: "a: tm-1/0", free: 1,
				waiting: map[string]int{"a": 1}},
			{do: request("b", 1), grants: "b: tm-2/0", waiting: map[string]int{"a": 1}},
		}},
		{"a forgotten job's slots return and its requests and exclusions go", []poolStep{
			{do: add(1, 2), free: 2},
			{do: request("a", 2), grants: "a: tm-1/0 tm-1/1"},
			{do: seq(request("a", 1), exclude("a", 1), request("b", 1)), waiting: map[string]int{"a": 1, "b": 1}},
			{do: forget("a"), grants: "b: tm-1/0", free: 1, waiting: map[string]int{"a": 0, "b": 0}},
			// The key names a new job now: the exclusion went with the old one.
			{do: request("a", 1), grants: "a: tm-1/1"},
			{do: seq(release("b", "1/0"), request("c", 1), forget("c")), free: 1},
		}},
		{"two jobs share the TaskManagers", []poolStep{
			{do: seq(add(1, 2), add(2, 2)), free: 4},
			{do: request("a", 2), grants: "a: tm-1/0 tm-2/0", free: 2},
			{do: request("b", 3), grants: "b: tm-1/1 tm-2/1", waiting: map[string]int{"b": 1}},
			{do: release("a", "2/0"), grants: "b: tm-2/0", waiting: map[string]int{"b": 0}},
			{do: forget("b"), free: 3},
			{do: request("c", 2), grants: "c: tm-2/0 tm-1/1", free: 1},
		}},
		{"a TaskManager is registered once and offers a slot", []poolStep{
			{do: add(1, 1), free: 1},
			{do: add(1, 2), out: "slot pool: TaskManager tm-1 (id 1) is already registered", free: 1},
			{do: add(2, 0), out: "slot pool: TaskManager tm-2 (id 2) offers 0 slots; it needs at least 1", free: 1},
			{do: seq(request("a", 0), request("a", -1)), free: 1, waiting: map[string]int{"a": 0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewSlotPool[string]()
			for i, st := range tc.steps {
				if out := st.do(p); out != st.out {
					t.Errorf("step %d: returned %q, want %q", i, out, st.out)
				}
				if got := formatGrants(t, p.Grants()); got != st.grants {
					t.Errorf("step %d: granted %q, want %q", i, got, st.grants)
				}
				if p.Grants() != nil {
					t.Errorf("step %d: Grants did not clear", i)
				}
				if got := p.Free(); got != st.free {
					t.Errorf("step %d: %d slots free, want %d", i, got, st.free)
				}
				for job, want := range st.waiting {
					if got := p.Waiting(job); got != want {
						t.Errorf("step %d: %s waits for %d slots, want %d", i, job, got, want)
					}
				}
				free := 0
				for _, tm := range p.TaskManagers() {
					free += tm.Free
				}
				if free != p.Free() {
					t.Errorf("step %d: the TaskManagers' free slots add up to %d, Free says %d", i, free, p.Free())
				}
			}
		})
	}
}

// TestSlotPoolMiniClusterPlacement pins the placement the mini-cluster has always had, on which reports'
// TaskManager names depend: with n equal TaskManagers, a job's i-th slot is slot i/n of tm-((i mod n)+1),
// whether the job asks for its slots at once or one at a time.
func TestSlotPoolMiniClusterPlacement(t *testing.T) {
	for _, tc := range []struct{ taskManagers, slots, asked int }{
		{1, 1, 1}, {1, 4, 4}, {2, 1, 2}, {2, 2, 3}, {3, 2, 6}, {4, 3, 10},
	} {
		for _, oneByOne := range []bool{false, true} {
			t.Run(fmt.Sprintf("%d TaskManagers of %d slots, %d asked, one by one %v", tc.taskManagers, tc.slots, tc.asked, oneByOne), func(t *testing.T) {
				p := NewSlotPool[int]()
				for i := range tc.taskManagers {
					if err := p.AddTaskManager(TaskManagerID(i+1), fmt.Sprintf("tm-%d", i+1), "", tc.slots); err != nil {
						t.Fatal(err)
					}
				}
				var got []Slot
				if oneByOne {
					for range tc.asked {
						p.Request(7, 1)
						for _, g := range p.Grants() {
							got = append(got, g.Slots...)
						}
					}
				} else {
					p.Request(7, tc.asked)
					gs := p.Grants()
					if len(gs) != 1 || gs[0].Job != 7 {
						t.Fatalf("grants %+v, want one for job 7", gs)
					}
					got = gs[0].Slots
				}
				var want []Slot
				for i := range tc.asked {
					tm := i%tc.taskManagers + 1
					want = append(want, Slot{TaskManager: TaskManagerID(tm), Name: fmt.Sprintf("tm-%d", tm), Number: i / tc.taskManagers})
				}
				if !slices.Equal(got, want) {
					t.Errorf("placed %v, want %v", got, want)
				}
			})
		}
	}
}

func TestSlotPoolTaskManagers(t *testing.T) {
	p := NewSlotPool[string]()
	for _, tm := range []struct {
		id    TaskManagerID
		slots int
	}{{5, 2}, {3, 1}, {9, 3}} {
		if err := p.AddTaskManager(tm.id, fmt.Sprintf("tm-%d", tm.id), fmt.Sprintf("h:%d", tm.id), tm.slots); err != nil {
			t.Fatal(err)
		}
	}
	p.Request("a", 3)
	// tm-3's slot was granted but not handed out: it is asked for again, and tm-9 has the most free.
	p.RemoveTaskManager(3)
	want := []TaskManagerSlots{{ID: 5, Name: "tm-5", DataAddress: "h:5", Slots: 2, Free: 1}, {ID: 9, Name: "tm-9", DataAddress: "h:9", Slots: 3, Free: 1}}
	if got := p.TaskManagers(); !slices.Equal(got, want) {
		t.Errorf("TaskManagers() = %+v, want %+v (registration order, the removed one gone)", got, want)
	}
}

// TestSlotPoolRandom drives pools with seeded random calls (TaskManagers joining and leaving, jobs asking,
// releasing, excluding and ending, grants taken now and then) and checks after every call what must always
// hold:
//
//   - no slot is held by two jobs, and no job is granted a slot of a TaskManager that is gone, that it
//     was excluded from before the grant, or that is out of the TaskManager's range;
//   - every slot asked for is granted (and handed out by Grants) or still waited for: a job's requests add
//     up to what it waits for plus what it was given, until it is forgotten;
//   - the pool is work-conserving: while a job waits, every free slot is of a TaskManager excluded for it;
//   - Free and TaskManagers agree with the slots the model sees held.
func TestSlotPoolRandom(t *testing.T) {
	seeds := 100
	if testing.Short() {
		seeds = 10
	}
	type key struct {
		tm TaskManagerID
		n  int
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 11))
		p := NewSlotPool[int]()
		slots := map[TaskManagerID]int{} // registered TaskManagers and their slot counts
		holder := map[key]int{}          // delivered grants still held, by slot
		asked := map[int]int{}           // per job: slots asked since it was last forgotten
		given := map[int]int{}           // per job: slots handed out since it was last forgotten
		excluded := map[int]map[TaskManagerID]bool{}
		var nextTM TaskManagerID
		var trace []string
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, after %s: %s", seed, strings.Join(trace[max(0, len(trace)-12):], "; "), fmt.Sprintf(format, args...))
		}
		take := func() {
			for _, g := range p.Grants() {
				for _, s := range g.Slots {
					k := key{s.TaskManager, s.Number}
					if n, ok := slots[s.TaskManager]; !ok || s.Number < 0 || s.Number >= n {
						fail("job %d was granted %v, not a slot of a registered TaskManager", g.Job, s)
					}
					if j, ok := holder[k]; ok {
						fail("job %d was granted %v, which job %d holds", g.Job, s, j)
					}
					if excluded[g.Job][s.TaskManager] {
						fail("job %d was granted %v of a TaskManager excluded for it", g.Job, s)
					}
					holder[k] = g.Job
					given[g.Job]++
				}
			}
		}
		for range 300 {
			job := rng.IntN(4)
			switch op := rng.IntN(100); {
			case op < 12:
				nextTM++
				n := 1 + rng.IntN(3)
				trace = append(trace, fmt.Sprintf("add tm-%d slots=%d", nextTM, n))
				if err := p.AddTaskManager(nextTM, fmt.Sprintf("tm-%d", nextTM), "", n); err != nil {
					fail("%v", err)
				}
				slots[nextTM] = n
			case op < 20:
				if len(slots) == 0 {
					continue
				}
				ids := slices.Sorted(maps.Keys(slots))
				id := ids[rng.IntN(len(ids))]
				trace = append(trace, fmt.Sprintf("remove tm-%d", id))
				// Grants not taken yet are taken back by the pool: take them first only sometimes.
				if rng.IntN(2) == 0 {
					take()
				}
				p.RemoveTaskManager(id)
				delete(slots, id)
				for k := range holder {
					if k.tm == id {
						delete(holder, k)
					}
				}
			case op < 50:
				n := 1 + rng.IntN(4)
				trace = append(trace, fmt.Sprintf("request %d n=%d", job, n))
				p.Request(job, n)
				asked[job] += n
			case op < 70:
				take() // a job releases only what it was handed
				var mine []Slot
				for k, j := range holder {
					if j == job && rng.IntN(2) == 0 {
						mine = append(mine, Slot{TaskManager: k.tm, Number: k.n})
						delete(holder, k)
					}
				}
				n := len(mine)
				// Slots the job does not hold are ignored: another job's, one past a TaskManager's end.
				for k, j := range holder {
					if j != job && rng.IntN(4) == 0 {
						mine = append(mine, Slot{TaskManager: k.tm, Number: k.n})
					}
				}
				mine = append(mine, Slot{TaskManager: nextTM, Number: 3})
				trace = append(trace, fmt.Sprintf("release %d %v", job, mine))
				p.Release(job, mine)
				// The slots are the job's again to ask for: count them as asked and given anew.
				asked[job] -= n
				given[job] -= n
			case op < 76:
				if len(slots) == 0 {
					continue
				}
				ids := slices.Sorted(maps.Keys(slots))
				id := ids[rng.IntN(len(ids))]
				trace = append(trace, fmt.Sprintf("exclude %d tm-%d", job, id))
				p.Exclude(job, id)
				if excluded[job] == nil {
					excluded[job] = map[TaskManagerID]bool{}
				}
				excluded[job][id] = true
			case op < 82:
				trace = append(trace, fmt.Sprintf("forget %d", job))
				p.ForgetJob(job)
				for k, j := range holder {
					if j == job {
						delete(holder, k)
					}
				}
				delete(asked, job)
				delete(given, job)
				delete(excluded, job)
			default:
				trace = append(trace, "grants")
				take()
			}
			// Grants not taken are held too, as far as Free goes; take them for the checks below unless
			// the step is one that leaves them pending on purpose.
			if rng.IntN(3) > 0 {
				take()
			} else {
				continue
			}
			total := 0
			for _, n := range slots {
				total += n
			}
			if p.Free() != total-len(holder) {
				fail("Free() = %d, the model has %d of %d slots held", p.Free(), len(holder), total)
			}
			free := map[TaskManagerID]int{}
			for id, n := range slots {
				free[id] = n
			}
			for k := range holder {
				free[k.tm]--
			}
			for _, tm := range p.TaskManagers() {
				if tm.Free != free[tm.ID] || tm.Slots != slots[tm.ID] {
					fail("TaskManagers() has %+v, the model %d of %d free", tm, free[tm.ID], slots[tm.ID])
				}
			}
			for j := range 4 {
				if w := p.Waiting(j); asked[j] != w+given[j] {
					fail("job %d asked for %d slots, waits for %d and was given %d", j, asked[j], w, given[j])
				} else if w > 0 {
					for id, f := range free {
						if f > 0 && !excluded[j][id] {
							fail("job %d waits for %d slots while tm-%d has %d free", j, w, id, f)
						}
					}
				}
			}
		}
	}
}
