package jobcore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/runnel-dev/runnel/internal/barrier"
	"github.com/runnel-dev/runnel/internal/checkpoint"
	"github.com/runnel-dev/runnel/internal/deploy"
	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
	"github.com/runnel-dev/runnel/internal/scheduler"
)

// replayFailures are the REASONs of "update ... replay=REASON": a ReplayFailure by its String.
var replayFailures = func() map[string]ReplayFailure {
	m := map[string]ReplayFailure{}
	for r := ReplayFine; r <= MaxReplayFailure; r++ {
		m[r.String()] = r
	}
	return m
}()

// TestScripts replays the scripts in testdata: each block's lines are events stepped in order (as a
// driver batches them), and the expected output is the trace of the core's Ready for the block, in a fixed
// order (messages by TaskManager, slot changes, logs), then the failovers, status, waiting sentence and
// deadline that changed. Regenerate with -rewrite and review the diff like code.
//
// The job is given as "job" with options (failover=, restart=, scheduling=, slot-sharing=off, slot-wait=;
// checkpointing with checkpoint-interval= and retained=, tolerable=, max-concurrent=, min-pause=,
// checkpoint-timeout=, mode=at-least-once, savepoint-on-stop=DIR, savepoint-timeout=, and savepoint=ID to
// start from a savepoint holding every subtask) and one vertex a line: "NAME p=N [PATTERN[/blocking]
// SOURCE]...". Events (each may end with t=DURATION, the time since the start): start TM slots=N...
// [next=ID] (answers NextID, grants, sets up, and runs everything), grant TM slots=N, setup-ok TM,
// setup-fail TM err=..., update ATTEMPT STATE [err=...] [peer=TM] [kind=deploy] [replay=REASON] [injection=N] [nonrecoverable],
// running|canceled|finished ATTEMPT... (or "all": every deployed attempt), observe ATTEMPT joined
// from=ATTEMPT sub=N lost=N | replayed|dropped from=ATTEMPT sub=N records=N | first-output | input-ended | replay-done, sampled token=N (CHANNEL dropped=R/B)... |
// missing, counters ATTEMPT in=N out=N, lose TM [leaving] reason=..., alive TM, tick, cancel, stop [dir=DIR],
// checkpoint ID (a tick that must trigger it, every running attempt acks, the commit succeeds), ack
// ATTEMPT|all id=ID, decline ATTEMPT id=ID [err=...] [not-ready], storage op=N [err=...] [corrupt]
// [next=ID] [checkpoint=ID] [skipped="ID: TEXT; ID: TEXT"], print executions|deployment ATTEMPT|checkpoints.
// ATTEMPT is "map[0]#1", or "map[0]" for the current attempt; CHANNEL is "r1@map[0]#0/1". Storage ops
// print as "storage#N KIND ..."; a skipped checkpoint or an error marked corrupt is damage
// (checkpoint.ErrCorrupt), one whose text starts with "incomplete" is checkpoint.ErrIncomplete. A
// failure's REASON is the String of its ReplayFailure (log-incomplete, diverged, source-cannot-replay,
// determinants-broken; none when left out): only it, never the text, says why a replay did not hold.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := &harness{t: t}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			lines := []string{d.FullCmd()}
			if d.Input != "" {
				lines = append(lines, strings.Split(d.Input, "\n")...)
			}
			if d.Cmd == "job" {
				return h.job(lines)
			}
			if h.core == nil {
				return "error: no job\n"
			}
			var out []string
			for _, l := range lines {
				if strings.TrimSpace(l) == "" {
					continue
				}
				o, err := h.event(l)
				if err != nil {
					out = append(out, "error: "+err.Error())
				}
				out = append(out, o...)
			}
			out = append(out, h.flush()...)
			if len(out) == 0 {
				return "ok\n"
			}
			return strings.Join(out, "\n") + "\n"
		})
	})
}

type harness struct {
	t     *testing.T
	jg    *graph.JobGraph
	core  *Core
	now   time.Duration
	ids   map[string]TaskManagerID
	names map[TaskManagerID]string
	addr  map[string]TaskManagerID
	// what was printed last, to print only what changed
	failovers []string
	status    string
	waiting   string
	deadline  string
	counts    string
	savepoint string
	slotNo    map[TaskManagerID]int
	// committed are the checkpoints the core asked to commit, by id: what a verification can name.
	committed map[int64]*checkpoint.CompletedCheckpoint
}

// damage is a storage error as a script writes it: its text, wrapping ErrCorrupt or ErrIncomplete.
type damage struct {
	text string
	kind error
}

func (d damage) Error() string        { return d.text }
func (d damage) Is(target error) bool { return target == d.kind }

func damageOf(text string) error {
	if strings.HasPrefix(text, "incomplete") {
		return damage{text, checkpoint.ErrIncomplete}
	}
	return damage{text, checkpoint.ErrCorrupt}
}

// fields splits a line at spaces, keeping "quoted values" whole (the quotes are removed).
func fields(line string) []string {
	var out []string
	var b strings.Builder
	quoted, any := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, any = !quoted, true
		case r == ' ' && !quoted:
			if any {
				out = append(out, b.String())
			}
			b.Reset()
			any = false
		default:
			b.WriteRune(r)
			any = true
		}
	}
	if any {
		out = append(out, b.String())
	}
	return out
}

// args splits fields into positional words and key=value options.
func args(fs []string) (pos []string, kv map[string]string) {
	kv = map[string]string{}
	for _, f := range fs {
		if k, v, ok := strings.Cut(f, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	return pos, kv
}

func (h *harness) job(lines []string) string {
	_, opts := args(fields(lines[0]))
	sg := &graph.StreamGraph{JobName: "test"}
	ids := map[string]int{}
	type edge struct {
		pattern, source string
		blocking        bool
	}
	var edges [][]edge
	for _, l := range lines[1:] {
		fs := fields(l)
		if len(fs) == 0 {
			continue
		}
		_, kv := args(fs[1:2])
		p, err := strconv.Atoi(kv["p"])
		if err != nil {
			return fmt.Sprintf("error: vertex %q: %v\n", l, err)
		}
		var es []edge
		for i := 2; i+1 < len(fs); i += 2 {
			pat, typ, _ := strings.Cut(fs[i], "/")
			es = append(es, edge{pattern: pat, source: fs[i+1], blocking: typ == "blocking"})
		}
		kind := graph.OperatorNode
		if len(es) == 0 {
			kind = graph.SourceNode
		}
		ids[fs[0]] = len(sg.Nodes)
		sg.Nodes = append(sg.Nodes, &graph.StreamNode{ID: len(sg.Nodes), Name: fs[0], Kind: kind, Parallelism: p, MaxParallelism: 128})
		edges = append(edges, es)
	}
	blocking := map[*graph.StreamEdge]bool{}
	for target, es := range edges {
		for _, e := range es {
			pat := map[string]graph.Pattern{"forward": graph.Forward, "rebalance": graph.Rebalance, "rescale": graph.Rescale,
				"hash": graph.Hash, "broadcast": graph.Broadcast}[e.pattern]
			src, ok := ids[e.source]
			if pat == 0 || !ok {
				return fmt.Sprintf("error: bad edge %s %s\n", e.pattern, e.source)
			}
			se := &graph.StreamEdge{Source: src, Target: target, Pattern: pat, PatternSet: true}
			blocking[se] = e.blocking
			sg.Edges = append(sg.Edges, se)
		}
	}
	for _, n := range sg.Nodes {
		consumed := slices.ContainsFunc(sg.Edges, func(e *graph.StreamEdge) bool { return e.Source == n.ID })
		if n.Kind == graph.OperatorNode && !consumed {
			n.Kind = graph.SinkNode
		}
	}
	cfg := Config{Seed: 1}
	var err error
	if v, ok := opts["failover"]; ok {
		if cfg.Failover, err = scheduler.ParseFailoverStrategy(v); err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	if v, ok := opts["restart"]; ok {
		if cfg.Restart, err = scheduler.ParseRestartStrategy(v); err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	if v, ok := opts["scheduling"]; ok {
		if cfg.Scheduling, err = scheduler.ParseSchedulingStrategy(v); err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	if v, ok := opts["slot-wait"]; ok {
		if cfg.SlotWaitTimeout, err = time.ParseDuration(v); err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	cfg.NoSlotSharing = opts["slot-sharing"] == "off"
	if v, ok := opts["checkpoint-interval"]; ok {
		cc := checkpoint.DefaultConfig()
		cfg.Checkpoint = &cc
		ms := func(v string) int64 {
			d, perr := time.ParseDuration(v)
			if perr != nil && err == nil {
				err = perr
			}
			return d.Milliseconds()
		}
		num := func(v string) int {
			n, perr := strconv.Atoi(v)
			if perr != nil && err == nil {
				err = perr
			}
			return n
		}
		cc.IntervalMillis = ms(v)
		if v, ok := opts["retained"]; ok {
			cc.Retained = num(v)
		}
		if v, ok := opts["tolerable"]; ok {
			cc.TolerableFailed = num(v)
		}
		if v, ok := opts["max-concurrent"]; ok {
			cc.MaxConcurrent = num(v)
		}
		if v, ok := opts["min-pause"]; ok {
			cc.MinPauseMillis = ms(v)
		}
		if v, ok := opts["checkpoint-timeout"]; ok {
			cc.TimeoutMillis = ms(v)
		}
		if opts["mode"] == "at-least-once" {
			cc.Mode = barrier.AtLeastOnce
		}
		if v, ok := opts["savepoint-timeout"]; ok {
			d, perr := time.ParseDuration(v)
			if perr != nil && err == nil {
				err = perr
			}
			cfg.SavepointTimeout = d
		}
		cfg.SavepointOnStop = opts["savepoint-on-stop"]
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	gopts := graph.JobGraphOptions{PipelinedType: graph.PipelinedBounded}
	if cfg.Failover == scheduler.ApproximateFailover || cfg.Failover == scheduler.TaskFailover {
		gopts.PipelinedType = graph.PipelinedApproximate
	}
	h.core = nil
	jg, err := graph.BuildJobGraph(sg, gopts)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	for _, e := range jg.Edges {
		if blocking[e.Stream] {
			e.PartitionType = graph.Blocking
		}
	}
	h.core = nil
	cfg.Job = jg
	h.jg = jg
	if v, ok := opts["savepoint"]; ok {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		sp := &checkpoint.CompletedCheckpoint{ID: id}
		for _, vx := range jg.Vertices {
			sp.Vertices = append(sp.Vertices, checkpoint.Vertex{ID: vx.ID, Name: vx.Name, Parallelism: int32(vx.Parallelism)})
		}
		for _, s := range jg.Subtasks() {
			sp.States = append(sp.States, checkpoint.StateHandle{Attempt: ident.Attempt{Subtask: s}})
		}
		cfg.Savepoint, cfg.SavepointLocation = sp, "savepoint-"+v
	}
	h.ids, h.names, h.addr, h.slotNo = map[string]TaskManagerID{}, map[TaskManagerID]string{}, map[string]TaskManagerID{}, map[TaskManagerID]int{}
	if v, ok := opts["resumed"]; ok {
		cfg.Resumed = &Resumed{At: time.Unix(0, 0), Reason: v}
	}
	if v, ok := opts["adopt"]; ok {
		if cfg.Adopt, err = h.adoption(jg, cfg.NoSlotSharing, strings.Split(v, ","), opts); err != nil {
			return "error: " + err.Error() + "\n"
		}
	}
	if h.core, err = New(cfg); err != nil {
		return "error: " + err.Error() + "\n"
	}
	h.now = 0
	h.failovers, h.status, h.waiting, h.deadline, h.counts, h.savepoint = nil, "", "", "", "", ""
	h.committed = map[int64]*checkpoint.CompletedCheckpoint{}
	if cfg.Adopt != nil && cfg.Adopt.Completed != nil {
		h.committed[cfg.Adopt.Completed.ID] = cfg.Adopt.Completed
	}
	if err := h.core.Step(0, Start{Wall: time.Unix(0, 0)}); err != nil {
		return "error: " + err.Error() + "\n"
	}
	return strings.Join(h.flush(), "\n") + "\n"
}

// adoption makes the Adoption of the job option adopt=TM,TM...: logical slot i runs on the (i mod n)-th
// TaskManager, every subtask's attempt #0 runs (heard=ID: the highest checkpoint id a task heard of;
// completed=ID: the newest completed checkpoint, this-run=no: taken before the run; finished=SUBTASK,...:
// those finished), as Reconcile would make it from the TaskManagers' reports.
func (h *harness) adoption(jg *graph.JobGraph, noSharing bool, tms []string, opts map[string]string) (*Adoption, error) {
	var reports []KeptReport
	for _, name := range tms {
		reports = append(reports, KeptReport{TaskManager: h.tm(name), Name: name, DataAddress: name + ":9000"})
	}
	if v, ok := opts["heard"]; ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, err
		}
		reports[0].Checkpoint = n
	}
	finished := map[ident.Subtask]bool{}
	if v, ok := opts["finished"]; ok {
		for _, f := range strings.Split(v, ",") {
			sub, err := h.subtaskOf(jg, f)
			if err != nil {
				return nil, err
			}
			finished[sub] = true
		}
	}
	for _, s := range jg.Subtasks() {
		r := &reports[logicalSlot(jg, noSharing, s)%len(reports)]
		t := KeptTask{Attempt: ident.Attempt{Subtask: s}, State: deploy.Running}
		if finished[s] {
			t.State = deploy.Finished
		}
		r.Tasks = append(r.Tasks, t)
	}
	a, err := Reconcile(jg, noSharing, reports)
	if err != nil {
		return nil, err
	}
	for _, tm := range a.Placement {
		name := h.names[tm]
		a.Slots = append(a.Slots, Slot{TaskManager: tm, Name: name, DataAddress: name + ":9000", Number: h.slotNo[tm]})
		h.slotNo[tm]++
	}
	if v, ok := opts["completed"]; ok {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, err
		}
		cp := &checkpoint.CompletedCheckpoint{ID: id}
		for _, vx := range jg.Vertices {
			cp.Vertices = append(cp.Vertices, checkpoint.Vertex{ID: vx.ID, Name: vx.Name, Parallelism: int32(vx.Parallelism)})
		}
		for _, s := range jg.Subtasks() {
			cp.States = append(cp.States, checkpoint.StateHandle{Attempt: ident.Attempt{Subtask: s}})
		}
		a.Completed, a.CompletedThisRun = cp, opts["this-run"] != "no"
	}
	return a, nil
}

func (h *harness) tm(name string) TaskManagerID {
	id, ok := h.ids[name]
	if !ok {
		id = TaskManagerID(len(h.ids) + 1)
		h.ids[name], h.names[id] = id, name
		h.addr[name+":9000"] = id
	}
	return id
}

func (h *harness) subtask(s string) (ident.Subtask, error) { return h.subtaskOf(h.jg, s) }

func (h *harness) subtaskOf(jg *graph.JobGraph, s string) (ident.Subtask, error) {
	name, rest, ok := strings.Cut(s, "[")
	idx, _, ok2 := strings.Cut(rest, "]")
	i, err := strconv.Atoi(idx)
	if !ok || !ok2 || err != nil {
		return ident.Subtask{}, fmt.Errorf("bad subtask %q", s)
	}
	for _, v := range jg.Vertices {
		if v.Name == name {
			return ident.Subtask{Vertex: v.ID, Index: int32(i)}, nil
		}
	}
	return ident.Subtask{}, fmt.Errorf("no vertex %q", name)
}

func (h *harness) attempt(s string) (ident.Attempt, error) {
	st, num, hasNum := strings.Cut(s, "#")
	sub, err := h.subtask(st)
	if err != nil {
		return ident.Attempt{}, err
	}
	if !hasNum {
		return h.core.execs[sub].attempt, nil
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		return ident.Attempt{}, fmt.Errorf("bad attempt %q", s)
	}
	return ident.Attempt{Subtask: sub, Number: int32(n)}, nil
}

// channel parses "r1@map[0]#0/1".
func (h *harness) channel(s string) (Channel, error) {
	r, rest, ok := strings.Cut(s, "@")
	at, sub, ok2 := strings.Cut(rest, "/")
	res, err := strconv.Atoi(strings.TrimPrefix(r, "r"))
	n, err2 := strconv.Atoi(sub)
	if !ok || !ok2 || err != nil || err2 != nil {
		return Channel{}, fmt.Errorf("bad channel %q", s)
	}
	a, err := h.attempt(at)
	if err != nil {
		return Channel{}, err
	}
	return Channel{Partition: ident.PartitionID{Result: ident.ResultID(res), Producer: a}, Subpartition: n}, nil
}

func (h *harness) fmtAttempt(a ident.Attempt) string {
	return fmt.Sprintf("%s#%d", h.core.name(a.Subtask), a.Number)
}

func (h *harness) fmtChannel(ch Channel) string {
	return fmt.Sprintf("r%d@%s/%d", ch.Partition.Result, h.fmtAttempt(ch.Partition.Producer), ch.Subpartition)
}

// step steps one event and notes the checkpoints the core asks to commit.
func (h *harness) step(ev Event) error {
	err := h.core.Step(h.now, ev)
	for _, op := range h.core.ready.Storage {
		if cm, ok := op.Request.(CommitMetadata); ok {
			h.committed[cm.Checkpoint.ID] = cm.Checkpoint
		}
	}
	return err
}

// pendingOp returns the id of the oldest unanswered storage op that match selects.
func (h *harness) pendingOp(match func(StorageRequest) bool) (uint64, bool) {
	for id := uint64(1); id <= h.core.opSeq; id++ {
		if r, out := h.core.ops[id]; out && match(r) {
			return id, true
		}
	}
	return 0, false
}

// ackAll acknowledges checkpoint id from every attempt the block sent its trigger to, and from every
// other running attempt: the barrier reached them all.
func (h *harness) ackAll(id int64) error {
	for _, s := range h.core.subtasks {
		ex := h.core.execs[s]
		if ex.state != deploy.Running {
			continue
		}
		if err := h.step(CheckpointAck{ID: id, Attempt: ex.attempt}); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) event(line string) ([]string, error) {
	pos, kv := args(fields(line))
	if t, ok := kv["t"]; ok {
		d, err := time.ParseDuration(t)
		if err != nil {
			return nil, err
		}
		h.now = d
	}
	if len(pos) == 0 {
		return nil, fmt.Errorf("empty event %q", line)
	}
	cmd, pos := pos[0], pos[1:]
	switch cmd {
	case "start", "grant":
		// TaskManagers and their slot counts: "tm-1 slots=2" pairs; the pool grants one slot per TaskManager
		// per round, in the order given (the mini-cluster's placement).
		fs := fields(line)[1:]
		type tmSlots struct {
			name string
			n    int
		}
		var want []tmSlots
		for i := 0; i < len(fs); i++ {
			if strings.HasPrefix(fs[i], "t=") {
				continue
			}
			if i+1 < len(fs) && strings.HasPrefix(fs[i+1], "slots=") {
				n, _ := strconv.Atoi(strings.TrimPrefix(fs[i+1], "slots="))
				want = append(want, tmSlots{fs[i], n})
				i++
			}
		}
		var g SlotsGranted
		for round := 0; ; round++ {
			added := false
			for _, w := range want {
				if round < w.n {
					id := h.tm(w.name)
					g.Slots = append(g.Slots, Slot{TaskManager: id, Name: w.name, DataAddress: w.name + ":9000", Number: h.slotNo[id]})
					h.slotNo[id]++
					added = true
				}
			}
			if !added {
				break
			}
		}
		if err := h.step(g); err != nil {
			return nil, err
		}
		if cmd == "start" {
			if op, ok := h.pendingOp(func(r StorageRequest) bool { _, ok := r.(NextID); return ok }); ok {
				next, _ := strconv.ParseInt(kv["next"], 10, 64)
				if err := h.step(StorageDone{Op: op, NextID: max(next, 1)}); err != nil {
					return nil, err
				}
			}
			for _, w := range want {
				if err := h.step(JobSetUp{TaskManager: h.tm(w.name)}); err != nil {
					return nil, err
				}
			}
			return nil, h.all(deploy.Running)
		}
	case "setup-ok", "setup-fail":
		ev := JobSetUp{TaskManager: h.tm(pos[0])}
		if cmd == "setup-fail" {
			ev.Err = errors.New(kv["err"])
		}
		return nil, h.step(ev)
	case "update":
		a, err := h.attempt(pos[0])
		if err != nil {
			return nil, err
		}
		st, ok := map[string]deploy.State{"DEPLOYING": deploy.Deploying, "RUNNING": deploy.Running, "FINISHED": deploy.Finished,
			"CANCELED": deploy.Canceled, "FAILED": deploy.Failed}[pos[1]]
		if !ok {
			return nil, fmt.Errorf("bad state %q", pos[1])
		}
		u := TaskUpdate{Attempt: a, State: st}
		if st == deploy.Failed {
			u.Failure = &Failure{Message: kv["err"], NonRecoverable: slices.Contains(pos, "nonrecoverable")}
			if kv["kind"] == "deploy" {
				u.Failure.Kind = FailureDeploy
			}
			if p, ok := kv["peer"]; ok {
				u.Failure.PeerDataAddress = p + ":9000"
			}
			if i, ok := kv["injection"]; ok {
				n, err := strconv.Atoi(i)
				if err != nil {
					return nil, fmt.Errorf("bad injection %q", i)
				}
				u.Failure.Injected, u.Failure.Injection = true, n
			}
			if r, ok := kv["replay"]; ok {
				if u.Failure.Replay, ok = replayFailures[r]; !ok {
					return nil, fmt.Errorf("bad replay failure %q", r)
				}
			}
		}
		return nil, h.step(u)
	case "running", "canceled", "finished":
		st := map[string]deploy.State{"running": deploy.Running, "canceled": deploy.Canceled, "finished": deploy.Finished}[cmd]
		if len(pos) == 1 && pos[0] == "all" {
			return nil, h.all(st)
		}
		for _, p := range pos {
			a, err := h.attempt(p)
			if err != nil {
				return nil, err
			}
			if err := h.step(TaskUpdate{Attempt: a, State: st}); err != nil {
				return nil, err
			}
		}
	case "observe":
		a, err := h.attempt(pos[0])
		if err != nil {
			return nil, err
		}
		o := Observation{Attempt: a, At: h.now}
		// The channel from=ATTEMPT sub=N into a.
		channel := func() (Channel, error) {
			from, err := h.attempt(kv["from"])
			if err != nil {
				return Channel{}, err
			}
			sub, _ := strconv.Atoi(kv["sub"])
			var res ident.ResultID
			for _, e := range h.jg.Vertex(a.Vertex).Inputs {
				if e.Source.ID == from.Vertex {
					res = e.Result
				}
			}
			return Channel{Partition: ident.PartitionID{Result: res, Producer: from}, Subpartition: sub}, nil
		}
		switch pos[1] {
		case "joined", "replayed", "dropped":
			if o.Channel, err = channel(); err != nil {
				return nil, err
			}
			o.Lost, _ = strconv.ParseUint(kv["lost"], 10, 64)
			o.Records, _ = strconv.ParseUint(kv["records"], 10, 64)
			o.SnapshotBefore, _ = strconv.ParseInt(kv["snapshot-before"], 10, 64)
			o.Kind = map[string]deploy.ObservationKind{"joined": deploy.ChannelJoined, "replayed": deploy.ChannelReplayed, "dropped": deploy.DuplicatesDropped}[pos[1]]
		case "first-output":
			o.Kind = deploy.FirstOutput
		case "input-ended":
			o.Kind = deploy.InputEnded
		case "replay-done":
			o.Kind = deploy.ReplayDone
		default:
			return nil, fmt.Errorf("bad observation %q", pos[1])
		}
		return nil, h.step(o)
	case "sampled":
		tok, _ := strconv.ParseUint(kv["token"], 10, 64)
		ev := SubpartitionsSampled{Token: tok, Missing: slices.Contains(pos, "missing")}
		fs := fields(line)
		for i, f := range fs {
			if !strings.HasPrefix(f, "r") || !strings.Contains(f, "@") {
				continue
			}
			ch, err := h.channel(f)
			if err != nil {
				return nil, err
			}
			var r, b uint64
			if i+1 < len(fs) {
				fmt.Sscanf(strings.TrimPrefix(fs[i+1], "dropped="), "%d/%d", &r, &b)
			}
			ev.Samples = append(ev.Samples, ChannelCounters{Channel: ch, Counters: SubpartitionCounters{RecordsDropped: r, BuffersDropped: b}})
		}
		return nil, h.step(ev)
	case "counters":
		a, err := h.attempt(pos[0])
		if err != nil {
			return nil, err
		}
		in, _ := strconv.ParseUint(kv["in"], 10, 64)
		out, _ := strconv.ParseUint(kv["out"], 10, 64)
		return nil, h.step(Counters{Counts: []AttemptCounters{{Attempt: a, In: in, Out: out}}})
	case "lose":
		return nil, h.step(TaskManagerLost{TaskManager: h.tm(pos[0]), Reason: kv["reason"], Leaving: slices.Contains(pos, "leaving")})
	case "alive":
		return nil, h.step(TaskManagerAlive{TaskManager: h.tm(pos[0])})
	case "tick":
		return nil, h.step(Tick{})
	case "cancel":
		return nil, h.step(Cancel{})
	case "stop":
		return nil, h.step(Stop{Dir: kv["dir"]})
	case "checkpoint":
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil {
			return nil, err
		}
		if err := h.step(Tick{}); err != nil {
			return nil, err
		}
		if h.core.lastTriggered < id {
			return nil, fmt.Errorf("checkpoint %d was not triggered (last %d)", id, h.core.lastTriggered)
		}
		if err := h.ackAll(id); err != nil {
			return nil, err
		}
		op, ok := h.pendingOp(func(r StorageRequest) bool { cm, ok := r.(CommitMetadata); return ok && cm.Checkpoint.ID == id })
		if !ok {
			return nil, fmt.Errorf("checkpoint %d is not being committed", id)
		}
		return nil, h.step(StorageDone{Op: op})
	case "ack":
		id, _ := strconv.ParseInt(kv["id"], 10, 64)
		if pos[0] == "all" {
			return nil, h.ackAll(id)
		}
		a, err := h.attempt(pos[0])
		if err != nil {
			return nil, err
		}
		return nil, h.step(CheckpointAck{ID: id, Attempt: a})
	case "decline":
		id, _ := strconv.ParseInt(kv["id"], 10, 64)
		a, err := h.attempt(pos[0])
		if err != nil {
			return nil, err
		}
		ev := CheckpointDecline{ID: id, Attempt: a, NotReady: slices.Contains(pos, "not-ready")}
		if e, ok := kv["err"]; ok {
			ev.Err = errors.New(e)
		}
		return nil, h.step(ev)
	case "storage":
		op, _ := strconv.ParseUint(kv["op"], 10, 64)
		ev := StorageDone{Op: op}
		if e, ok := kv["err"]; ok {
			ev.Err = errors.New(e)
			if slices.Contains(pos, "corrupt") {
				ev.Err = damageOf(e)
			}
		}
		if v, ok := kv["next"]; ok {
			ev.NextID, _ = strconv.ParseInt(v, 10, 64)
		}
		if v, ok := kv["checkpoint"]; ok {
			id, _ := strconv.ParseInt(v, 10, 64)
			if ev.Checkpoint = h.committed[id]; ev.Checkpoint == nil {
				return nil, fmt.Errorf("checkpoint %d was never committed", id)
			}
		}
		if v, ok := kv["skipped"]; ok {
			for _, sk := range strings.Split(v, ";") {
				idText, text, _ := strings.Cut(strings.TrimSpace(sk), ": ")
				id, err := strconv.ParseInt(idText, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("bad skipped %q", sk)
				}
				ev.Skipped = append(ev.Skipped, checkpoint.SkippedCheckpoint{ID: id, Err: damageOf(text)})
			}
		}
		return nil, h.step(ev)
	case "print":
		return h.print(pos)
	default:
		return nil, fmt.Errorf("unknown event %q", cmd)
	}
	return nil, nil
}

// all moves every deployed, not yet terminal attempt (DEPLOYING, or RUNNING for a terminal st) to st.
func (h *harness) all(st deploy.State) error {
	for _, s := range h.core.subtasks {
		ex := h.core.execs[s]
		if ex.state == deploy.Created || ex.state.Terminal() || ex.state == st {
			continue
		}
		if err := h.step(TaskUpdate{Attempt: ex.attempt, State: st}); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) print(what []string) ([]string, error) {
	if len(what) == 0 {
		return nil, errors.New("print what?")
	}
	switch what[0] {
	case "executions":
		byTM := map[string][]string{}
		var tms []string
		for _, s := range h.core.subtasks {
			ex := h.core.execs[s]
			tm := "unplaced"
			if ex.tm != 0 {
				tm = h.names[ex.tm]
			} else if g := h.core.slots[ex.slot]; g != nil {
				tm = g.Name
			}
			if _, ok := byTM[tm]; !ok {
				tms = append(tms, tm)
			}
			byTM[tm] = append(byTM[tm], fmt.Sprintf("%s %s", h.fmtAttempt(ex.attempt), ex.state))
		}
		slices.Sort(tms)
		var out []string
		for _, tm := range tms {
			out = append(out, tm+": "+strings.Join(byTM[tm], ", "))
		}
		return out, nil
	case "deployment":
		a, err := h.attempt(what[1])
		if err != nil {
			return nil, err
		}
		ex := h.core.current(a)
		if ex == nil || ex.tm == 0 {
			return nil, fmt.Errorf("%s is not deployed", what[1])
		}
		d := h.core.descriptor(ex)
		out := []string{fmt.Sprintf("%s on %s: parallelism=%d", h.fmtAttempt(a), d.Info.TaskManager, d.Info.Parallelism)}
		for _, o := range d.Outputs {
			out = append(out, fmt.Sprintf("  output r%d subpartitions=%d reconnectable=%t blocking=%t", o.Result, o.Subpartitions, o.Reconnectable, o.Blocking))
		}
		for i, in := range d.Inputs {
			for _, ch := range in.Channels {
				where := ch.Address
				if ch.Local {
					where = "local"
				}
				out = append(out, fmt.Sprintf("  input %d: %s %s", i, h.fmtChannel(Channel{Partition: ch.Partition, Subpartition: ch.Subpartition}), where))
			}
		}
		if r := d.Restore; r != nil {
			out = append(out, fmt.Sprintf("  restore chk-%d same-run=%t", r.CheckpointID, r.SameRun))
		}
		return out, nil
	case "checkpoints":
		if h.core.coord == nil {
			return []string{"no coordinator"}, nil
		}
		st := h.core.coord.Stats()
		return []string{fmt.Sprintf("completed=%d failed=%d aborted=%d in_progress=%d consecutive_failed=%d latest=%s",
			st.Completed, st.Failed, st.Aborted, st.InProgress, st.ConsecutiveFailed, h.fmtRestore(h.core.restorePoint()))}, nil
	}
	return nil, fmt.Errorf("cannot print %q", what[0])
}

// flush prints the core's Ready and what changed in its snapshot, then advances it.
func (h *harness) flush() []string {
	c := h.core
	r := c.Ready()
	defer c.Advance()
	var out []string
	for _, op := range r.Storage {
		out = append(out, fmt.Sprintf("storage#%d %s", op.ID, h.fmtStorage(op)))
	}
	msgs := slices.Clone(r.Messages)
	slices.SortStableFunc(msgs, func(a, b Message) int { return strings.Compare(h.names[a.To], h.names[b.To]) })
	// One line per run of messages of one kind to one TaskManager; a run of deployments notes which
	// failover created each group of attempts.
	type item struct {
		to     TaskManagerID
		kind   string
		text   string
		group  *Failover
		suffix string // after the last of a run with the same suffix
	}
	showRestore := c.cfg.Checkpoint != nil || c.cfg.Savepoint != nil
	var items []item
	for _, m := range msgs {
		it := item{to: m.To}
		switch b := m.Body.(type) {
		case SetupJob:
			it.kind = "setup-job"
		case Probe:
			it.kind = "probe"
		case Deploy:
			it.kind, it.text = "deploy", h.fmtAttempt(b.Deployment.Info.Attempt)
			if b.Deployment.Replay {
				it.text += "(replay)"
			}
			if ex := c.current(b.Deployment.Info.Attempt); ex != nil {
				it.group = ex.createdBy
			}
			if showRestore {
				it.suffix = " restore=none"
				if r := b.Deployment.Restore; r != nil {
					it.suffix = fmt.Sprintf(" restore=chk-%d", r.CheckpointID)
				}
				if n := b.Deployment.SkipCheckpointsUpTo; n > 0 {
					it.suffix += fmt.Sprintf(" skip-up-to=%d", n)
				}
			}
			if f := b.Deployment.FiredInjections; len(f) > 0 {
				it.suffix += fmt.Sprintf(" fired=%v", f)
			}
		case TriggerCheckpoint:
			it.kind, it.text = fmt.Sprintf("trigger %d", b.ID), h.fmtAttempt(b.Attempt)
		case AbortCheckpoint:
			it.kind, it.text = fmt.Sprintf("abort-checkpoint %d", b.ID), h.fmtAttempt(b.Attempt)
		case NotifyCheckpointComplete:
			it.kind, it.text = fmt.Sprintf("notify-complete %d", b.ID), h.fmtAttempt(b.Attempt)
		case CancelTask:
			it.kind, it.text = "cancel", h.fmtAttempt(b.Attempt)
		case ReleasePartitions:
			it.kind, it.text = "release", h.fmtAttempt(b.Attempt)
		case SampleSubpartitions:
			var chs []string
			for _, ch := range b.Channels {
				chs = append(chs, h.fmtChannel(ch))
			}
			it.kind, it.text = "sample", fmt.Sprintf("token=%d [%s]", b.Token, strings.Join(chs, " "))
		}
		items = append(items, it)
	}
	for i := 0; i < len(items); {
		j := i + 1
		mergeable := items[i].kind != "sample" && items[i].kind != "probe" && items[i].kind != "setup-job"
		for mergeable && j < len(items) && items[j].to == items[i].to && items[j].kind == items[i].kind {
			j++
		}
		line := fmt.Sprintf("%s: %s", h.names[items[i].to], items[i].kind)
		for k := i; k < j; k++ {
			if items[k].text != "" {
				line += " " + items[k].text
			}
			if g := items[k].group; g != nil && (k+1 == j || items[k+1].group != g) {
				line += fmt.Sprintf(" (failover %d)", h.failoverNo(g))
			}
			if sf := items[k].suffix; sf != "" && (k+1 == j || items[k+1].suffix != sf) {
				line += sf
			}
		}
		out = append(out, line)
		i = j
	}
	for _, s := range r.Slots {
		if s.Request > 0 {
			out = append(out, fmt.Sprintf("slots request %d", s.Request))
		}
		if len(s.Release) > 0 {
			var gs []string
			for _, g := range s.Release {
				gs = append(gs, fmt.Sprintf("%s/%d", g.Name, g.Number))
			}
			out = append(out, "slots release "+strings.Join(gs, " "))
		}
	}
	for _, l := range r.Logs {
		s := fmt.Sprintf("log %s %q", l.Level, l.Message)
		for i := 0; i+1 < len(l.Attrs); i += 2 {
			v := fmt.Sprint(l.Attrs[i+1])
			if a, ok := l.Attrs[i+1].(ident.Attempt); ok {
				v = h.fmtAttempt(a)
			}
			if strings.ContainsAny(v, " =") {
				v = strconv.Quote(v)
			}
			s += fmt.Sprintf(" %v=%s", l.Attrs[i], v)
		}
		out = append(out, s)
	}
	snap := c.Snapshot()
	for i, f := range snap.Failovers {
		s := h.fmtFailover(i+1, f)
		if i >= len(h.failovers) {
			h.failovers = append(h.failovers, "")
		}
		if s != h.failovers[i] {
			out = append(out, s)
			h.failovers[i] = s
		}
	}
	if c.coord != nil {
		n := c.coord.Counts()
		if s := fmt.Sprintf("checkpoints completed=%d failed=%d aborted=%d", n.Completed, n.Failed, n.Aborted); s != h.counts {
			out = append(out, s)
			h.counts = s
		}
	}
	if sp := c.savepoint; sp != nil {
		s := "savepoint pending"
		switch {
		case sp.written != "":
			s = "savepoint written to " + sp.written
		case sp.err != nil:
			s = "savepoint failed: " + sp.err.Error()
		}
		if s != h.savepoint {
			out = append(out, s)
			h.savepoint = s
		}
	}
	if st := string(c.status); st != h.status {
		s := "status " + st
		if c.err != nil {
			s += " err=" + strconv.Quote(c.err.Error())
		}
		out = append(out, s)
		h.status = st
	}
	if snap.Waiting != h.waiting {
		out = append(out, "waiting "+strconv.Quote(snap.Waiting))
		h.waiting = snap.Waiting
	}
	dl := "none"
	if d, ok := c.NextDeadline(); ok {
		dl = d.String()
	}
	if dl != h.deadline {
		out = append(out, "next deadline "+dl)
		h.deadline = dl
	}
	return out
}

func (h *harness) fmtRestore(cp *checkpoint.CompletedCheckpoint) string {
	if cp == nil {
		return "none"
	}
	return fmt.Sprintf("chk-%d", cp.ID)
}

func (h *harness) fmtStorage(op StorageOp) string {
	switch r := op.Request.(type) {
	case NextID:
		return "next-id"
	case CommitMetadata:
		return fmt.Sprintf("commit chk-%d", r.Checkpoint.ID)
	case VerifyLatest:
		return "verify-latest for " + h.subtasks(r.Subtasks)
	case WriteSavepoint:
		return fmt.Sprintf("write-savepoint chk-%d to %s by %v", r.Checkpoint.ID, r.Dir, op.Deadline)
	case Retain:
		return fmt.Sprintf("retain %d", r.N)
	case Discard:
		return fmt.Sprintf("discard chk-%d", r.CheckpointID)
	}
	return fmt.Sprintf("%T", op.Request)
}

func (h *harness) failoverNo(ev *Failover) int {
	return slices.Index(h.core.history.Events(), ev) + 1
}

func (h *harness) subtasks(ss []ident.Subtask) string {
	var names []string
	for _, s := range ss {
		names = append(names, h.core.name(s))
	}
	return "[" + strings.Join(names, " ") + "]"
}

func (h *harness) fmtFailover(n int, f Failover) string {
	s := fmt.Sprintf("failover %d: failed=%s", n, h.core.name(f.Failed))
	if f.Global {
		s = fmt.Sprintf("failover %d: failed=job", n)
	}
	if len(f.FailedSubtasks) > 0 {
		s += " failed_subtasks=" + h.subtasks(f.FailedSubtasks)
	}
	if f.TaskManager != "" {
		s += " taskmanager=" + f.TaskManager
	}
	s += fmt.Sprintf(" strategy=%s restart=%s", f.Strategy, h.subtasks(f.Restarted))
	if f.Fallback != "" {
		s += " fallback=" + strconv.Quote(f.Fallback)
	}
	if f.Cause != nil {
		s += " cause=" + strconv.Quote(f.Cause.Error())
	}
	if !f.RecoveredAt.IsZero() {
		s += fmt.Sprintf(" recovered_after=%v", f.RecoveredAt.Sub(f.FailedAt))
	}
	if !f.OutputAt.IsZero() {
		s += fmt.Sprintf(" output_after=%v", f.OutputAt.Sub(f.FailedAt))
	}
	if f.CheckpointRestored != nil {
		s += fmt.Sprintf(" checkpoint_restored=%d", *f.CheckpointRestored)
	}
	if f.RecordsLost+f.RecordsDropped+f.BuffersDropped+f.PartialRecordsSkipped > 0 {
		s += fmt.Sprintf(" records_lost=%d records_dropped=%d buffers_dropped=%d", f.RecordsLost, f.RecordsDropped, f.BuffersDropped)
		for _, ch := range f.Channels {
			s += fmt.Sprintf("\n  channel %s->%s lost=%d dropped=%d/%d", h.core.name(ch.Producer), h.core.name(ch.Consumer),
				ch.RecordsLost, ch.RecordsDropped, ch.BuffersDropped)
		}
	}
	if f.RecordsReplayed+f.DuplicatesDropped > 0 {
		s += fmt.Sprintf(" records_replayed=%d duplicates_dropped=%d", f.RecordsReplayed, f.DuplicatesDropped)
		for _, ch := range f.Replay {
			s += fmt.Sprintf("\n  channel %s->%s replayed=%d duplicates=%d", h.core.name(ch.Producer), h.core.name(ch.Consumer),
				ch.RecordsReplayed, ch.DuplicatesDropped)
		}
	}
	return s
}
