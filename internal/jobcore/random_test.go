package jobcore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/ident"
)

// TestRandomEvents drives cores with seeded random events, as a cluster would send them (updates, acks
// and declines, answers of the storage, some damaged, some late, TaskManager losses and new grants, probes,
// samples, ticks, a stop or a cancel at the end), and checks after every step that the ordering contract
// and the core's invariants hold:
//
//   - no Deploy of a restarted attempt before the VerifyLatest that chose its checkpoint answered, and the
//     checkpoint it restores is the one that answer named;
//   - no NotifyCheckpointComplete of a checkpoint before its CommitMetadata succeeded;
//   - no checkpoint both aborted (AbortCheckpoint) and completed (NotifyCheckpointComplete), and no
//     checkpoint's abort or completion to an attempt after the CancelTask of a job that fails or is
//     cancelled (the abort and completion come first, so that sinks settle what they prepared);
//   - the restore spec of every deployed restarted attempt names the checkpoint its failover reports;
//   - no message to a lost TaskManager; attempt numbers only rise;
//   - the status changes only as the status machine allows, and is terminal exactly when every
//     execution is (but for a job whose stopped subtasks wait for their restart, or for a checkpoint's
//     commit, which decides whether the checkpoint completed); storage ops out stay within their bound.
//
// Each run ends with a Cancel answered by every task: any state ends. A failure prints the seed and the
// last events.
func TestRandomEvents(t *testing.T) {
	seeds := 80
	if testing.Short() {
		seeds = 10
	}
	for seed := range uint64(seeds) {
		w := newWorld(t, seed)
		w.run(1500)
		if t.Failed() {
			return
		}
		t.Logf("seed %d: %s", seed, w.stats())
	}
}

// world is the cluster around one core: its TaskManagers, tasks and storage, as the test imagines them.
type world struct {
	t   *testing.T
	rng *rand.Rand
	h   *harness
	c   *Core
	now time.Duration
	log []string

	nextTM  TaskManagerID
	lost    map[TaskManagerID]bool
	setup   []TaskManagerID // SetupJob received, not answered
	probes  []TaskManagerID
	request int // slots asked for, not granted
	tasks   map[ident.Attempt]*simTask
	samples []SampleSubpartitions
	ops     []StorageOp // FIFO: the storage worker answers in order

	triggered []int64 // checkpoints triggered, newest last
	committed map[int64]*checkpoint.CompletedCheckpoint
	// okCommits are the checkpoints whose commit succeeded; damaged those the storage now reads as damaged.
	okCommits []int64
	damaged   map[int64]bool
	// verifyOut counts the unanswered VerifyLatest ops covering each subtask; verified is the checkpoint
	// the last answered one named (-1: restore as recorded; absent: none answered since its last deploy).
	verifyOut map[ident.Subtask]int
	verified  map[ident.Subtask]int64
	attempts  map[ident.Subtask]int32
	status    Status
	// abortSent and completeSent are the checkpoints whose AbortCheckpoint or NotifyCheckpointComplete
	// went out; finalCancel the attempts that got the CancelTask of a failing or cancelled job.
	abortSent, completeSent map[int64]bool
	finalCancel             map[ident.Attempt]bool
}

type simTask struct {
	tm        TaskManagerID
	state     deploy.State
	canceling bool
	ended     bool
	// notified is set when a NotifyCheckpointComplete of a checkpoint triggered after its input ended
	// reached it: only then may it finish.
	notified   bool
	endedAfter int64
	acked      map[int64]bool
}

func newWorld(t *testing.T, seed uint64) *world {
	rng := rand.New(rand.NewPCG(seed, 7))
	failover := []string{"region", "full", "approximate"}[rng.IntN(3)]
	delay := []string{"0s", "10ms"}[rng.IntN(2)]
	h := &harness{t: t}
	out := h.job([]string{fmt.Sprintf("job failover=%s restart=fixed-delay:attempts=1000,delay=%s checkpoint-interval=50ms retained=2 tolerable=1 savepoint-on-stop=/sp", failover, delay),
		"source p=2", "map p=2 forward source", "sink p=2 hash map"})
	if strings.HasPrefix(out, "error") {
		t.Fatal(out)
	}
	w := &world{t: t, rng: rng, h: h, c: h.core, lost: map[TaskManagerID]bool{}, tasks: map[ident.Attempt]*simTask{},
		committed: map[int64]*checkpoint.CompletedCheckpoint{}, damaged: map[int64]bool{},
		verifyOut: map[ident.Subtask]int{}, verified: map[ident.Subtask]int64{}, attempts: map[ident.Subtask]int32{},
		status: StatusRunning, nextTM: 100, abortSent: map[int64]bool{}, completeSent: map[int64]bool{},
		finalCancel: map[ident.Attempt]bool{}}
	w.log = append(w.log, fmt.Sprintf("seed %d: failover=%s delay=%s", seed, failover, delay))
	// h.job stepped Start and printed its Ready: NextID (op 1) and the request for every slot.
	w.ops = append(w.ops, StorageOp{ID: 1, Request: NextID{}})
	w.request = w.c.slotCount
	return w
}

// step feeds one event and takes the core's Ready, checking the contract.
func (w *world) step(ev Event) {
	w.t.Helper()
	w.log = append(w.log, fmt.Sprintf("t=%v %T %+v", w.now, ev, ev))
	if err := w.c.Step(w.now, ev); err != nil {
		w.fail("step: %v", err)
	}
	w.take()
}

func (w *world) fail(format string, args ...any) {
	w.t.Helper()
	last := w.log
	if len(last) > 40 {
		last = append([]string{w.log[0], "..."}, last[len(last)-40:]...)
	}
	w.t.Fatalf("%s\nlast events:\n%s", fmt.Sprintf(format, args...), strings.Join(last, "\n"))
}

// take carries out the core's Ready as the world would, checking each command against what it knows.
func (w *world) take() {
	w.t.Helper()
	r := w.c.Ready()
	defer w.c.Advance()
	for _, op := range r.Storage {
		w.ops = append(w.ops, op)
		switch q := op.Request.(type) {
		case CommitMetadata:
			w.committed[q.Checkpoint.ID] = q.Checkpoint
		case VerifyLatest:
			for _, s := range q.Subtasks {
				w.verifyOut[s]++
			}
		}
	}
	for _, m := range r.Messages {
		if w.lost[m.To] {
			w.fail("%T sent to lost TaskManager %d", m.Body, m.To)
		}
		switch b := m.Body.(type) {
		case SetupJob:
			w.setup = append(w.setup, m.To)
		case Probe:
			w.probes = append(w.probes, m.To)
		case SampleSubpartitions:
			w.samples = append(w.samples, b)
		case Deploy:
			w.deployed(m.To, b.Deployment)
		case CancelTask:
			if st := w.tasks[b.Attempt]; st != nil {
				st.canceling = true
			}
			if s := w.c.Status(); s == StatusFailing || s == StatusCanceling {
				w.finalCancel[b.Attempt] = true
			}
		case AbortCheckpoint:
			if w.completeSent[b.ID] {
				w.fail("AbortCheckpoint %d to %v: the checkpoint completed", b.ID, b.Attempt)
			}
			if w.finalCancel[b.Attempt] {
				w.fail("AbortCheckpoint %d to %v after the job's CancelTask", b.ID, b.Attempt)
			}
			w.abortSent[b.ID] = true
		case TriggerCheckpoint:
			if !slices.Contains(w.triggered, b.ID) {
				w.triggered = append(w.triggered, b.ID)
			}
		case NotifyCheckpointComplete:
			if !slices.Contains(w.okCommits, b.ID) {
				w.fail("NotifyCheckpointComplete %d to %v before its commit succeeded", b.ID, b.Attempt)
			}
			if w.abortSent[b.ID] {
				w.fail("NotifyCheckpointComplete %d to %v: the checkpoint was aborted", b.ID, b.Attempt)
			}
			if w.finalCancel[b.Attempt] {
				w.fail("NotifyCheckpointComplete %d to %v after the job's CancelTask", b.ID, b.Attempt)
			}
			w.completeSent[b.ID] = true
			if st := w.tasks[b.Attempt]; st != nil && st.ended && b.ID > st.endedAfter {
				st.notified = true
			}
		}
	}
	for _, s := range r.Slots {
		w.request += s.Request
	}
	w.checkState()
}

func (w *world) deployed(to TaskManagerID, d Deployment) {
	a := d.Info.Attempt
	if last, ok := w.attempts[a.Subtask]; ok && a.Number <= last {
		w.fail("deploy of %v after attempt %d", a, last)
	}
	w.attempts[a.Subtask] = a.Number
	w.tasks[a] = &simTask{tm: to, state: deploy.Deploying, acked: map[int64]bool{}}
	if a.Number == 0 {
		return
	}
	ex := w.c.current(a)
	var restored *int64
	if d.Restore != nil {
		id := d.Restore.CheckpointID
		restored = &id
		if id >= w.c.firstCheckpointID {
			if w.verifyOut[a.Subtask] > 0 {
				w.fail("deploy of %v while a verification of it is out", a)
			}
			v, ok := w.verified[a.Subtask]
			switch {
			case !ok:
				w.fail("deploy of %v restoring checkpoint %d, never verified", a, id)
			case v >= 0 && v != id:
				w.fail("deploy of %v restores checkpoint %d, the verification named %d", a, id, v)
			}
		}
	}
	delete(w.verified, a.Subtask)
	if ex == nil || ex.createdBy == nil {
		w.fail("restarted attempt %v deployed without its failover", a)
	}
	rep := ex.createdBy.CheckpointRestored
	if (rep == nil) != (restored == nil) || (rep != nil && *rep != *restored) {
		w.fail("attempt %v restores %v, its failover reports %v", a, fmtID(restored), fmtID(rep))
	}
}

func fmtID(id *int64) string {
	if id == nil {
		return "none"
	}
	return fmt.Sprint(*id)
}

// checkState checks the status machine and the bounds.
func (w *world) checkState() {
	st := w.c.Status()
	if st != w.status {
		// One step may pass through FAILING or CANCELING to the end (nothing left to wait for).
		allowed := map[Status][]Status{StatusRunning: {StatusFailing, StatusCanceling, StatusFinished, StatusFailed, StatusCanceled},
			StatusFailing: {StatusFailed}, StatusCanceling: {StatusCanceled}}
		if !slices.Contains(allowed[w.status], st) {
			w.fail("status went from %s to %s", w.status, st)
		}
		w.status = st
	}
	// Terminal exactly when every execution is, but for a running job whose stopped subtasks wait for
	// their restart, and a job that waits for a commit.
	all, finished := true, true
	for _, ex := range w.c.execs {
		all = all && ex.state.Terminal()
		finished = finished && ex.state == deploy.Finished
	}
	switch {
	case st.Terminal() && !all:
		w.fail("status %s with executions still running", st)
	case st.Terminal() && w.c.committing():
		w.fail("status %s with a checkpoint's commit unanswered", st)
	case all && w.c.committing():
		// The job ends once the commit answers.
	case all && (st == StatusFailing || st == StatusCanceling):
		w.fail("status %s with every execution stopped", st)
	case all && st == StatusRunning && w.c.plan == nil:
		w.fail("status RUNNING with every execution stopped (all finished: %t) and no restart planned", finished)
	}
	if len(w.c.ops) > maxStorageOps {
		w.fail("%d storage ops out, bound %d", len(w.c.ops), maxStorageOps)
	}
}

// run plays n random events, then cancels and lets every task stop.
func (w *world) run(n int) {
	for i := 0; i < n && !w.c.Status().Terminal(); i++ {
		w.now += time.Duration(w.rng.IntN(8)) * time.Millisecond
		w.randomEvent()
	}
	if w.rng.IntN(2) == 0 {
		w.step(Stop{})
		for range 20 {
			w.answerStorage()
			for a, st := range w.tasks {
				if st.state == deploy.Running && !w.lost[st.tm] {
					for _, id := range w.triggered {
						if !st.acked[id] {
							st.acked[id] = true
							w.step(CheckpointAck{ID: id, Attempt: a})
						}
					}
				}
			}
		}
	}
	w.step(Cancel{})
	for range 50 {
		if w.c.Status().Terminal() {
			return
		}
		w.now += time.Millisecond
		w.answerStorage()
		w.stopTasks()
		w.step(Tick{})
	}
	w.fail("cancelled job still %s", w.c.Status())
}

// stopTasks reports every task asked to stop as stopped.
func (w *world) stopTasks() {
	for _, a := range w.alive() {
		if st := w.tasks[a]; st.canceling {
			st.state = deploy.Canceled
			w.step(TaskUpdate{Attempt: a, State: deploy.Canceled})
		}
	}
}

// alive lists the attempts deployed on TaskManagers not lost that have not ended, in a fixed order.
func (w *world) alive() []ident.Attempt {
	var as []ident.Attempt
	for a, st := range w.tasks {
		if !st.state.Terminal() && !w.lost[st.tm] {
			as = append(as, a)
		}
	}
	slices.SortFunc(as, func(x, y ident.Attempt) int {
		if c := compareSubtasks(x.Subtask, y.Subtask); c != 0 {
			return c
		}
		return int(x.Number - y.Number)
	})
	return as
}

func (w *world) liveTMs() []TaskManagerID {
	var ids []TaskManagerID
	for _, a := range w.alive() {
		if tm := w.tasks[a].tm; !slices.Contains(ids, tm) {
			ids = append(ids, tm)
		}
	}
	slices.Sort(ids)
	return ids
}

func (w *world) randomEvent() {
	as := w.alive()
	k := w.rng.IntN(1000)
	in := func(lo, hi int) bool { return lo <= k && k < hi } // each kind its own share, whatever is possible
	switch {
	case in(0, 150) && len(w.ops) > 0:
		w.answerStorage()
	case in(150, 200) && w.request > 0:
		// One TaskManager with one slot per slot asked for: losing one costs a part of the job.
		g := SlotsGranted{}
		for range w.request {
			w.nextTM++
			g.Slots = append(g.Slots, Slot{TaskManager: w.nextTM, Name: fmt.Sprintf("tm-%d", w.nextTM),
				DataAddress: fmt.Sprintf("tm-%d:9000", w.nextTM)})
		}
		w.request = 0
		w.step(g)
	case in(200, 250) && len(w.setup) > 0:
		tm := w.setup[0]
		w.setup = w.setup[1:]
		w.step(JobSetUp{TaskManager: tm})
	case in(250, 280) && len(w.probes) > 0:
		tm := w.probes[0]
		w.probes = w.probes[1:]
		if w.rng.IntN(6) > 0 {
			w.step(TaskManagerAlive{TaskManager: tm})
		} else {
			w.loseTM(tm)
		}
	case in(280, 320) && len(w.samples) > 0:
		s := w.samples[0]
		w.samples = w.samples[1:]
		ev := SubpartitionsSampled{Token: s.Token, Missing: w.rng.IntN(5) == 0}
		for _, ch := range s.Channels {
			ev.Samples = append(ev.Samples, ChannelCounters{Channel: ch, Counters: SubpartitionCounters{RecordsDropped: uint64(w.rng.IntN(50))}})
		}
		w.step(ev)
	case in(320, 500) && len(as) > 0:
		w.updateTask(as[w.rng.IntN(len(as))])
	case in(500, 800) && len(as) > 0 && len(w.triggered) > 0:
		a := as[w.rng.IntN(len(as))]
		id := w.triggered[len(w.triggered)-1-w.rng.IntN(min(2, len(w.triggered)))]
		st := w.tasks[a]
		switch {
		case st.acked[id]:
		case w.rng.IntN(30) == 0:
			w.step(CheckpointDecline{ID: id, Attempt: a, Err: errors.New("snapshot failed"), NotReady: w.rng.IntN(2) == 0})
		default:
			st.acked[id] = true
			w.step(CheckpointAck{ID: id, Attempt: a})
		}
	case in(800, 804) && len(w.liveTMs()) > 1:
		tms := w.liveTMs()
		w.loseTM(tms[w.rng.IntN(len(tms))])
	case in(804, 808) && len(as) > 0:
		// A failure naming another TaskManager as an unreachable peer: a suspect to probe.
		a := as[w.rng.IntN(len(as))]
		tms := slices.DeleteFunc(w.liveTMs(), func(tm TaskManagerID) bool { return tm == w.tasks[a].tm })
		if st := w.tasks[a]; st.state == deploy.Running && len(tms) > 0 {
			peer := tms[w.rng.IntN(len(tms))]
			st.state = deploy.Failed
			w.step(TaskUpdate{Attempt: a, State: deploy.Failed, Failure: &Failure{Message: "connection closed", PeerDataAddress: fmt.Sprintf("tm-%d:9000", peer)}})
		}
	default:
		w.step(Tick{})
	}
}

// updateTask moves an attempt along its life: a cancelled one stops; a deploying one runs; a running one
// may end its input, finish once a checkpoint after that completed, or (rarely) fail.
func (w *world) updateTask(a ident.Attempt) {
	st := w.tasks[a]
	switch {
	case st.canceling:
		st.state = deploy.Canceled
		w.step(TaskUpdate{Attempt: a, State: deploy.Canceled})
	case st.state == deploy.Deploying:
		st.state = deploy.Running
		w.step(TaskUpdate{Attempt: a, State: deploy.Running})
	case st.state == deploy.Running && st.ended && st.notified:
		st.state = deploy.Finished
		w.step(TaskUpdate{Attempt: a, State: deploy.Finished})
	case st.state == deploy.Running && !st.ended && w.rng.IntN(10) == 0:
		st.ended = true
		if len(w.triggered) > 0 {
			st.endedAfter = w.triggered[len(w.triggered)-1]
		}
		w.step(Observation{Attempt: a, Kind: deploy.InputEnded, At: w.now})
	case st.state == deploy.Running && w.rng.IntN(25) == 0:
		st.state = deploy.Failed
		w.step(TaskUpdate{Attempt: a, State: deploy.Failed, Failure: &Failure{Message: "boom"}})
	}
}

func (w *world) loseTM(tm TaskManagerID) {
	if w.lost[tm] {
		return
	}
	w.lost[tm] = true
	w.step(TaskManagerLost{TaskManager: tm, Reason: "no heartbeat"})
}

// answerStorage answers the oldest op: commits mostly succeed (and are sometimes damaged later),
// verifications name the newest checkpoint not damaged, or fail as the storage would.
func (w *world) answerStorage() {
	if len(w.ops) == 0 {
		return
	}
	op := w.ops[0]
	w.ops = w.ops[1:]
	done := StorageDone{Op: op.ID}
	switch q := op.Request.(type) {
	case NextID:
		done.NextID = int64(1 + w.rng.IntN(5))
	case CommitMetadata:
		if w.rng.IntN(8) == 0 {
			done.Err = errors.New("context deadline exceeded")
		} else {
			w.okCommits = append(w.okCommits, q.Checkpoint.ID)
			if w.rng.IntN(6) == 0 {
				w.damaged[q.Checkpoint.ID] = true
			}
		}
	case VerifyLatest:
		var id int64 = -1
		switch {
		case w.rng.IntN(15) == 0:
			done.Err = errors.New("storage unreachable")
		default:
			for _, ok := range slices.Backward(w.okCommits) {
				if w.damaged[ok] {
					done.Skipped = append(done.Skipped, checkpoint.SkippedCheckpoint{ID: ok, Err: damage{"bad checksum", checkpoint.ErrCorrupt}})
					continue
				}
				id = ok
				break
			}
			if id < 0 {
				done.Err = damage{"none of the committed checkpoints is valid", checkpoint.ErrCorrupt}
			} else {
				done.Checkpoint = w.committed[id]
			}
		}
		for _, s := range q.Subtasks {
			w.verifyOut[s]--
			w.verified[s] = id
		}
	case WriteSavepoint:
		if w.rng.IntN(4) == 0 {
			done.Err = errors.New("disk full")
		}
	}
	w.step(done)
}

// stats sums up what a run exercised (go test -v shows it), so that a change of weights that stops
// checkpoints from completing or failovers from restoring shows.
func (w *world) stats() string {
	n := map[string]int{}
	for _, l := range w.log {
		for _, k := range []string{"StorageDone", "CheckpointAck", "CheckpointDecline", "TaskManagerLost", "Stop"} {
			if strings.Contains(l, k) {
				n[k]++
			}
		}
	}
	snap := w.c.Snapshot()
	restored, global := 0, 0
	for _, f := range snap.Failovers {
		if f.CheckpointRestored != nil {
			restored++
		}
		if f.Global {
			global++
		}
	}
	return fmt.Sprintf("%v failovers=%d restored=%d global=%d counts=%+v status=%s err=%v", n, len(snap.Failovers), restored, global, *snap.Checkpoints, snap.Status, snap.Err)
}
