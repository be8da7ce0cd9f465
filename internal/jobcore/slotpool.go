package jobcore

import (
	"cmp"
	"fmt"
	"slices"
)

// SlotPool is the JobManager's pool of the physical slots of its registered TaskManagers, shared by the jobs
// it runs; J is the key the caller names its jobs by. It decides which job gets which slot and nothing else:
// it starts no goroutine, takes no lock and reads no clock, so its owner (the dispatcher's loop) calls it
// and then hands out what Grants returns.
//
// Requests are served first come, first served across jobs: the oldest request takes every free slot it may
// use before a younger one gets any, and a request takes what is free now and waits for the rest, which it
// gets as slots are released or TaskManagers join. A request never waits for slots it may not use (of a
// TaskManager excluded for its job), so it holds no younger request back from them.
//
// Placement spreads a request over the TaskManagers in rounds: each round gives one slot of every
// TaskManager with a free slot, those with more free slots first and ties in registration order, and a
// slot's Number is its index on its TaskManager, the lowest free first. With n equal TaskManagers and one
// job, the job's i-th slot is so on the ((i mod n)+1)-th TaskManager registered, as the mini-cluster has
// always placed subtasks.
//
// Bounds: slots are finite, and requests beyond the free slots wait, as long as their job lives (the job's
// own slot-wait timeout gives up on them, then ForgetJob drops them). The queue holds one entry per Request
// not yet granted in full, each of at least one slot, so never more entries than slots waited for; a job
// asks only for the logical slots it has unbound (jobcore.Core does), so that is at most its slot count. The
// TaskManager table holds the registered TaskManagers (RemoveTaskManager drops one), the exclusions at most
// one entry per job and TaskManager, and the grants not yet taken by Grants at most the slots there are.
type SlotPool[J comparable] struct {
	// tms are the registered TaskManagers in registration order, which breaks placement ties.
	tms  []*poolTaskManager[J]
	byID map[TaskManagerID]*poolTaskManager[J]
	// queue holds the requests not yet granted in full, oldest first.
	queue []slotRequest[J]
	// excluded are the TaskManagers whose slots a job must not get again.
	excluded map[J]map[TaskManagerID]bool
	// grants are the slots granted since the last call of Grants, one entry per job in the order of each
	// job's first grant, slots in the order granted.
	grants []Grant[J]
}

// poolTaskManager is one registered TaskManager and who holds each of its slots.
type poolTaskManager[J comparable] struct {
	id                TaskManagerID
	name, dataAddress string
	slots             []slotHolder[J]
	free              int
}

// slotHolder says whether a slot is held, and by which job (a job key's zero value may be a real job).
type slotHolder[J comparable] struct {
	held bool
	job  J
}

// slotRequest is a job's wish for n more slots.
type slotRequest[J comparable] struct {
	job J
	n   int
}

// Grant is a set of slots given to one job, in the order the job should bind them.
type Grant[J comparable] struct {
	Job   J
	Slots []Slot
}

// TaskManagerSlots is a read view of one registered TaskManager's slots.
type TaskManagerSlots struct {
	ID          TaskManagerID
	Name        string
	DataAddress string
	// Slots is how many slots it has, Free how many no job holds.
	Slots, Free int
}

// NewSlotPool returns an empty pool: no TaskManager, no request.
func NewSlotPool[J comparable]() *SlotPool[J] {
	return &SlotPool[J]{byID: map[TaskManagerID]*poolTaskManager[J]{}, excluded: map[J]map[TaskManagerID]bool{}}
}

// AddTaskManager adds the slots of a TaskManager that registered, and grants them to the requests that
// wait. The id is that of one registration: a TaskManager that registers again comes with a new id, and
// reusing the id of a TaskManager still in the pool is refused, as is a TaskManager without slots.
func (p *SlotPool[J]) AddTaskManager(id TaskManagerID, name, dataAddress string, slots int) error {
	if _, ok := p.byID[id]; ok {
		return fmt.Errorf("slot pool: TaskManager %s (id %d) is already registered", name, id)
	}
	if slots < 1 {
		return fmt.Errorf("slot pool: TaskManager %s (id %d) offers %d slots; it needs at least 1", name, id, slots)
	}
	tm := &poolTaskManager[J]{id: id, name: name, dataAddress: dataAddress, slots: make([]slotHolder[J], slots), free: slots}
	p.tms = append(p.tms, tm)
	p.byID[id] = tm
	p.schedule()
	return nil
}

// RemoveTaskManager takes a TaskManager's slots out of the pool (it was lost or it left). It returns the
// jobs that held slots of it, each once, in the order of the lowest slot each held: those jobs learn of the
// loss from a jobcore.TaskManagerLost event the caller sends them, not from the pool, and a later Release of
// one of those slots is ignored. Slots of it granted since the last Grants call are taken back from the
// grants and asked for again, at the head of the queue, since their jobs never learned of them. An unknown
// id changes nothing.
func (p *SlotPool[J]) RemoveTaskManager(id TaskManagerID) []J {
	tm, ok := p.byID[id]
	if !ok {
		return nil
	}
	p.revoke(func(_ J, s Slot) bool { return s.TaskManager == id }, true)
	var holders []J
	for _, s := range tm.slots {
		if s.held && !slices.Contains(holders, s.job) {
			holders = append(holders, s.job)
		}
	}
	delete(p.byID, id)
	p.tms = slices.DeleteFunc(p.tms, func(t *poolTaskManager[J]) bool { return t == tm })
	for _, ex := range p.excluded {
		delete(ex, id)
	}
	// Requeued requests may fit on the TaskManagers that remain.
	p.schedule()
	return holders
}

// Request asks for n more slots for job. They are granted as soon as free slots allow, in the order of
// the requests: partly at once, the rest as slots are released or TaskManagers join. A request for no slot
// changes nothing.
func (p *SlotPool[J]) Request(job J, n int) {
	if n <= 0 {
		return
	}
	if last := len(p.queue) - 1; last >= 0 && p.queue[last].job == job {
		// Consecutive requests of one job are one request: nothing was queued between them.
		p.queue[last].n += n
	} else {
		p.queue = append(p.queue, slotRequest[J]{job: job, n: n})
	}
	p.schedule()
}

// Release gives slots job holds back to the pool, which grants them to the requests that wait. A slot
// that job does not hold (its TaskManager was removed, or it was released before) is ignored: after a
// TaskManager loss both the job and the dispatcher may return the same slot.
func (p *SlotPool[J]) Release(job J, slots []Slot) {
	for _, s := range slots {
		tm, ok := p.byID[s.TaskManager]
		if !ok || s.Number < 0 || s.Number >= len(tm.slots) {
			continue
		}
		h := &tm.slots[s.Number]
		if !h.held || h.job != job {
			continue
		}
		*h = slotHolder[J]{}
		tm.free++
	}
	p.schedule()
}

// Exclude stops granting job the slots of TaskManager tm, for as long as the job lives: the TaskManager
// could not set the job up (another build, storage it cannot reach), and would not on a second try. Slots
// of tm the job holds stay held until the job releases them; those granted since the last Grants call, of
// which the job has not learned, are taken back and asked for again. An unknown TaskManager changes nothing.
func (p *SlotPool[J]) Exclude(job J, tm TaskManagerID) {
	if _, ok := p.byID[tm]; !ok {
		return
	}
	ex := p.excluded[job]
	if ex == nil {
		ex = map[TaskManagerID]bool{}
		p.excluded[job] = ex
	}
	ex[tm] = true
	p.revoke(func(j J, s Slot) bool { return j == job && s.TaskManager == tm }, true)
	p.schedule()
}

// ForgetJob drops everything the pool knows of a job that ended: its slots return to the pool (and go to
// the requests that wait), its requests, grants not yet taken by Grants and exclusions go.
func (p *SlotPool[J]) ForgetJob(job J) {
	p.revoke(func(j J, _ Slot) bool { return j == job }, false)
	p.queue = slices.DeleteFunc(p.queue, func(r slotRequest[J]) bool { return r.job == job })
	delete(p.excluded, job)
	for _, tm := range p.tms {
		for i := range tm.slots {
			if h := &tm.slots[i]; h.held && h.job == job {
				*h = slotHolder[J]{}
				tm.free++
			}
		}
	}
	p.schedule()
}

// Grants returns the slots granted since the last call, one Grant per job in the order of each job's first
// grant, and clears them: the caller hands each job its Grant (a jobcore.SlotsGranted event).
func (p *SlotPool[J]) Grants() []Grant[J] {
	g := p.grants
	p.grants = nil
	return g
}

// Waiting returns how many slots job asked for and has not been granted.
func (p *SlotPool[J]) Waiting(job J) int {
	n := 0
	for _, r := range p.queue {
		if r.job == job {
			n += r.n
		}
	}
	return n
}

// Free returns how many slots of the registered TaskManagers no job holds.
func (p *SlotPool[J]) Free() int {
	n := 0
	for _, tm := range p.tms {
		n += tm.free
	}
	return n
}

// TaskManagers returns the registered TaskManagers' slots, in registration order.
func (p *SlotPool[J]) TaskManagers() []TaskManagerSlots {
	out := make([]TaskManagerSlots, 0, len(p.tms))
	for _, tm := range p.tms {
		out = append(out, TaskManagerSlots{ID: tm.id, Name: tm.name, DataAddress: tm.dataAddress, Slots: len(tm.slots), Free: tm.free})
	}
	return out
}

// schedule grants free slots to the queued requests, oldest first. A request keeps its place until it is
// granted in full; one that may use no free slot is passed over, not waited for.
func (p *SlotPool[J]) schedule() {
	for i := 0; i < len(p.queue); {
		if p.Free() == 0 {
			return
		}
		r := &p.queue[i]
		p.grantTo(r)
		if r.n == 0 {
			p.queue = slices.Delete(p.queue, i, i+1)
			continue
		}
		i++
	}
}

// grantTo grants r what it may take now, in rounds of one slot per TaskManager (see SlotPool).
func (p *SlotPool[J]) grantTo(r *slotRequest[J]) {
	ex := p.excluded[r.job]
	for r.n > 0 {
		var round []*poolTaskManager[J]
		for _, tm := range p.tms {
			if tm.free > 0 && !ex[tm.id] {
				round = append(round, tm)
			}
		}
		if len(round) == 0 {
			return
		}
		// Stable: ties keep registration order.
		slices.SortStableFunc(round, func(a, b *poolTaskManager[J]) int { return cmp.Compare(b.free, a.free) })
		for _, tm := range round {
			if r.n == 0 {
				return
			}
			p.grant(r.job, tm)
			r.n--
		}
	}
}

// Take gives job the lowest free slot of TaskManager tm at once, ahead of the queue: for a job taken over
// from a lost leader, whose tasks run on tm already. False: tm is not registered, or has no free slot.
func (p *SlotPool[J]) Take(job J, tm TaskManagerID) (Slot, bool) {
	t := p.byID[tm]
	if t == nil || t.free == 0 {
		return Slot{}, false
	}
	n := slices.IndexFunc(t.slots, func(h slotHolder[J]) bool { return !h.held })
	t.slots[n] = slotHolder[J]{held: true, job: job}
	t.free--
	return Slot{TaskManager: t.id, Name: t.name, DataAddress: t.dataAddress, Number: n}, true
}

// grant gives job the lowest free slot of tm.
func (p *SlotPool[J]) grant(job J, tm *poolTaskManager[J]) {
	n := slices.IndexFunc(tm.slots, func(h slotHolder[J]) bool { return !h.held })
	tm.slots[n] = slotHolder[J]{held: true, job: job}
	tm.free--
	s := Slot{TaskManager: tm.id, Name: tm.name, DataAddress: tm.dataAddress, Number: n}
	for i := range p.grants {
		if p.grants[i].Job == job {
			p.grants[i].Slots = append(p.grants[i].Slots, s)
			return
		}
	}
	p.grants = append(p.grants, Grant[J]{Job: job, Slots: []Slot{s}})
}

// revoke takes back the slots granted since the last Grants call that match, freeing them; with requeue
// each job's revoked slots are asked for again at the head of the queue, in the order of the grants.
func (p *SlotPool[J]) revoke(match func(J, Slot) bool, requeue bool) {
	var again []slotRequest[J]
	for i := range p.grants {
		g := &p.grants[i]
		n := 0
		g.Slots = slices.DeleteFunc(g.Slots, func(s Slot) bool {
			if !match(g.Job, s) {
				return false
			}
			tm := p.byID[s.TaskManager]
			tm.slots[s.Number] = slotHolder[J]{}
			tm.free++
			n++
			return true
		})
		if n > 0 && requeue {
			again = append(again, slotRequest[J]{job: g.Job, n: n})
		}
	}
	p.grants = slices.DeleteFunc(p.grants, func(g Grant[J]) bool { return len(g.Slots) == 0 })
	p.queue = append(again, p.queue...)
}
