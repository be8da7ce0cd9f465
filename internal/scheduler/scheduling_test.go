package scheduler

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/graph"
	"github.com/runnel-dev/runnel/internal/ident"
)

// runScript drives a scheduling strategy with a script of lines "command args -> regions deployed", where
// command is one of
//
//	start
//	finish rN@name[i]         OnResultFinished
//	restart name[i] ...       OnRegionsRestarted with the regions of these subtasks
//	failover MODE name[i]     OnRegionsRestarted with the regions MODE failover restarts after name[i] fails
//
// and the deployed regions are written by their members, "{a[0] b[0]} {c[1]}".
func runScript(t *testing.T, j job, mode SchedulingMode, script string) {
	t.Helper()
	jg := j.build(t)
	topo := ComputeRegions(jg)
	s, err := NewSchedulingStrategy(mode, topo)
	if err != nil {
		t.Fatal(err)
	}
	for n, line := range strings.Split(strings.TrimSpace(script), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, want, ok := strings.Cut(line, "->")
		if !ok {
			t.Fatalf("line %d: no ->", n+1)
		}
		f := strings.Fields(cmd)
		var got []RegionID
		switch f[0] {
		case "start":
			got = s.Start()
		case "finish":
			p := partition(t, jg, f[1])
			got = s.OnResultFinished(p.Result, p.Producer)
		case "restart":
			got = s.OnRegionsRestarted(topo.RegionsOf(subtasks(t, jg, strings.Join(f[1:], " "))))
		case "failover":
			m, err := ParseFailoverStrategy(f[1])
			if err != nil {
				t.Fatal(err)
			}
			fs, err := NewFailoverStrategy(m, topo, nil)
			if err != nil {
				t.Fatal(err)
			}
			got = s.OnRegionsRestarted(topo.RegionsOf(fs.TasksToRestart(subtask(t, jg, f[2]))))
		default:
			t.Fatalf("line %d: unknown command %q", n+1, f[0])
		}
		if g, w := fmtRegions(topo, got), strings.TrimSpace(want); g != w {
			t.Fatalf("line %d: %s\n got %s\nwant %s", n+1, line, g, w)
		}
	}
}

// The bounded job of the scheduling tests: two sources, a hash exchange (blocking) into agg, pipelined into
// fmt, and a blocking rebalance into one sink. Results: r0 src>agg, r1 agg>fmt, r2 fmt>sink.
var boundedJob = job{
	nodes: []string{"src:src:2", "agg:op:2", "fmt:op:2", "sink:sink:1"},
	edges: []string{"src>agg:hash:blocking", "agg>fmt", "fmt>sink:rebalance:blocking"},
}

func TestPipelinedRegionScheduling(t *testing.T) {
	cases := []struct {
		name   string
		job    job
		script string
	}{
		{"bounded job", boundedJob, `
			start -> {src[0]} {src[1]}
			start ->
			finish r0@src[0] ->
			# repeated, pipelined, not yet deployed, unknown: ignored
			finish r0@src[0] ->
			finish r1@agg[0] ->
			finish r2@fmt[0] ->
			finish r9@src[0] ->
			finish r0@src[1] -> {agg[0] fmt[0]} {agg[1] fmt[1]}
			finish r2@fmt[0] ->
			finish r2@fmt[1] -> {sink[0]}
			# agg[1] fails: its region and the sink restart; agg's inputs are still there, the sink's are not.
			failover region agg[1] -> {agg[1] fmt[1]}
			finish r2@fmt[1] -> {sink[0]}
			# src[1] fails: everything downstream of it waits for it again.
			failover region src[1] -> {src[1]}
			finish r0@src[1] -> {agg[0] fmt[0]} {agg[1] fmt[1]}
			finish r2@fmt[1] ->
			finish r2@fmt[0] -> {sink[0]}
			# the sink alone
			failover region sink[0] -> {sink[0]}
			# full failover starts over
			failover full agg[0] -> {src[0]} {src[1]}
			finish r0@src[1] ->
			finish r0@src[0] -> {agg[0] fmt[0]} {agg[1] fmt[1]}
			start ->
		`},
		{"restart of a region that was never deployed", boundedJob, `
			start -> {src[0]} {src[1]}
			restart agg[0] sink[0] ->
			finish r0@src[0] ->
			finish r0@src[1] -> {agg[0] fmt[0]} {agg[1] fmt[1]}
		`},
		{"finish from a restarted producer before redeployment is ignored", job{nodes: []string{"a:src:1", "b:sink:1"}, edges: []string{"a>b:forward:blocking"}}, `
			start -> {a[0]}
			finish r0@a[0] -> {b[0]}
			restart a[0] b[0] -> {a[0]}
			finish r0@a[0] -> {b[0]}
		`},
		{"restart before start deploys nothing", boundedJob, `
			restart src[0] ->
			start -> {src[0]} {src[1]}
		`},
		{"streaming job: everything at once", job{nodes: []string{"src:src:2", "map:op:2", "sink:sink:2"}, edges: []string{"src>map", "map>sink:hash"}}, `
			start -> {src[0,1] map[0,1] sink[0,1]}
			failover region map[1] -> {src[0,1] map[0,1] sink[0,1]}
		`},
		{"disconnected pipelines", job{nodes: []string{"a:src:2", "b:sink:2", "c:src:1", "d:sink:1"}, edges: []string{"a>b", "c>d"}}, `
			start -> {a[0] b[0]} {a[1] b[1]} {c[0] d[0]}
			failover region d[0] -> {c[0] d[0]}
		`},
		{"pointwise blocking edges gate only their consumers", job{nodes: []string{"src:src:2", "sink:sink:2"}, edges: []string{"src>sink:forward:blocking"}}, `
			start -> {src[0]} {src[1]}
			finish r0@src[1] -> {sink[1]}
			finish r0@src[0] -> {sink[0]}
		`},
		{"stages of blocking edges", job{nodes: []string{"a:src:1", "b:op:2", "c:sink:1"}, edges: []string{"a>b:rebalance:blocking", "b>c:rebalance:blocking"}}, `
			start -> {a[0]}
			finish r0@a[0] -> {b[0]} {b[1]}
			finish r1@b[1] ->
			finish r1@b[0] -> {c[0]}
			failover region b[0] -> {b[0]}
			finish r1@b[0] -> {c[0]}
		`},
		{"two inputs", job{nodes: []string{"x:src:1", "y:src:1", "j:sink:1"}, edges: []string{"x>j:forward:blocking", "y>j:forward:blocking"}}, `
			start -> {x[0]} {y[0]}
			finish r1@y[0] -> 
			finish r0@x[0] -> {j[0]}
		`},
		// Each region consumes a blocking result of the other (a[1] feeds c[0] and a[0] feeds c[1]): they are
		// deployed together and read those results once produced.
		{"blocking cycle between regions", job{nodes: []string{"a:src:2", "b:sink:2", "c:op:2"}, edges: []string{"a>b", "a>c:hash:blocking", "c>b"}}, `
			start -> {a[0] c[0] b[0]} {a[1] c[1] b[1]}
			finish r1@a[0] ->
			failover region b[0] -> {a[0] c[0] b[0]} {a[1] c[1] b[1]}
		`},
		// Under approximate recovery each subtask is a region, but a reconnectable consumer is deployed with
		// its producer so that no data is dropped before it attaches.
		{"approximate regions are deployed with their producers", job{nodes: []string{"src:src:1", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:rebalance:blocking", "map>sink"}, approx: true}, `
			start -> {src[0]}
			finish r0@src[0] -> {map[0]} {map[1]} {sink[0]} {sink[1]}
			failover approximate sink[1] -> {sink[1]}
			failover approximate map[0] -> {map[0]} {sink[0]}
			failover approximate src[0] -> {src[0]}
			finish r0@src[0] -> {map[0]} {map[1]} {sink[0]} {sink[1]}
		`},
		{"approximate hash joins the group", job{nodes: []string{"src:src:1", "map:op:2", "sink:sink:2"}, edges: []string{"src>map:rebalance:blocking", "map>sink:hash"}, approx: true}, `
			start -> {src[0]}
			finish r0@src[0] -> {map[0]} {map[1]} {sink[0]} {sink[1]}
			failover approximate map[1] -> {map[1]} {sink[0]} {sink[1]}
		`},
		// A blocking edge between subtasks that approximate edges join is no gate either.
		{"approximate and blocking cycle", job{nodes: []string{"a:src:2", "b:sink:2", "c:op:2"}, edges: []string{"a>b", "a>c:hash:blocking", "c>b"}, approx: true}, `
			start -> {a[0]} {a[1]} {c[0]} {c[1]} {b[0]} {b[1]}
			failover approximate c[0] -> {c[0]} {b[0]}
		`},
		{"streaming approximate", job{nodes: []string{"src:src:2", "sink:sink:2"}, edges: []string{"src>sink"}, approx: true}, `
			start -> {src[0]} {src[1]} {sink[0]} {sink[1]}
			failover approximate src[1] -> {src[1]} {sink[1]}
		`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { runScript(t, tc.job, PipelinedRegionScheduling, tc.script) })
	}
}

func TestEagerScheduling(t *testing.T) {
	runScript(t, boundedJob, EagerScheduling, `
		restart src[0] ->
		start -> {src[0]} {src[1]} {agg[0] fmt[0]} {agg[1] fmt[1]} {sink[0]}
		start ->
		finish r0@src[0] ->
		finish r0@src[1] ->
		failover region src[1] -> {src[1]} {agg[0] fmt[0]} {agg[1] fmt[1]} {sink[0]}
		failover region sink[0] -> {sink[0]}
	`)
	topo := ComputeRegions(boundedJob.build(t))
	s, _ := NewSchedulingStrategy(EagerScheduling, topo)
	s.Start()
	if got := s.OnRegionsRestarted([]RegionID{4, -1, 9, 4, 0}); fmtIDs(got) != "0 4" {
		t.Errorf("OnRegionsRestarted = %v", got)
	}
}

func TestParseSchedulingStrategy(t *testing.T) {
	for _, m := range schedulingModes {
		got, err := ParseSchedulingStrategy(m.String())
		if err != nil || got != m {
			t.Errorf("ParseSchedulingStrategy(%q) = %v, %v", m, got, err)
		}
	}
	for _, bad := range []string{"", "region", "lazy"} {
		if _, err := ParseSchedulingStrategy(bad); err == nil || !strings.Contains(err.Error(), "valid values are eager, pipelined-region") {
			t.Errorf("ParseSchedulingStrategy(%q): %v", bad, err)
		}
	}
	if _, err := NewSchedulingStrategy(0, ComputeRegions(boundedJob.build(t))); err == nil {
		t.Error("mode 0 accepted")
	}
	if s := SchedulingMode(7).String(); s != "scheduling-mode(7)" {
		t.Errorf("String = %q", s)
	}
}

// simulation runs a job under pipelined-region scheduling the way a job master would: it deploys what the
// strategy returns, and reports the blocking partitions of deployed producers as finished one at a time, in
// order, until nothing is left to report. It checks that each region is deployed at most once, only once
// every blocking partition it consumes is finished or produced in its own scheduling group, and together with
// the regions it shares reconnectable connections with; and that in the end every region is deployed.
type simulation struct {
	t        *testing.T
	name     string
	topo     *Topology
	s        SchedulingStrategy
	deployed []bool
	finished map[Partition]bool
	blocking []Partition // every blocking partition that crosses regions
	group    []int       // region -> smallest region of its group, by oracleGroups
}

// oracleGroups labels each region with the smallest region of its scheduling group, computed slowly from the
// definition: regions joined by reconnectable connections, then components that reach each other through
// blocking connections.
func oracleGroups(topo *Topology) []int {
	n := topo.NumRegions()
	label := make([]int, n)
	for i := range label {
		label[i] = i
	}
	conns := connections(topo.Graph())
	region := func(s ident.Subtask) int { r, _ := topo.RegionOf(s); return int(r) }
	relabel := func(a, b int) {
		for i := range label {
			if label[i] == b {
				label[i] = a
			}
		}
	}
	for _, c := range conns {
		if c.e.PartitionType == graph.PipelinedApproximate {
			if a, b := label[region(c.p)], label[region(c.c)]; a != b {
				relabel(min(a, b), max(a, b))
			}
		}
	}
	reach := make([][]bool, n)
	for i := range reach {
		reach[i] = make([]bool, n)
		reach[i][i] = true
	}
	for _, c := range conns {
		if c.e.PartitionType == graph.Blocking {
			reach[label[region(c.p)]][label[region(c.c)]] = true
		}
	}
	for k := 0; k < n; k++ {
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if reach[i][k] && reach[k][j] {
					reach[i][j] = true
				}
			}
		}
	}
	group := make([]int, n)
	for r := range group {
		group[r] = -1
		for g := 0; g < n && group[r] < 0; g++ {
			if reach[label[r]][label[g]] && reach[label[g]][label[r]] {
				group[r] = g
			}
		}
	}
	return group
}

func newSimulation(t *testing.T, name string, topo *Topology) *simulation {
	s, err := NewSchedulingStrategy(PipelinedRegionScheduling, topo)
	if err != nil {
		t.Fatal(err)
	}
	sim := &simulation{t: t, name: name, topo: topo, s: s, deployed: make([]bool, topo.NumRegions()), finished: map[Partition]bool{}, group: oracleGroups(topo)}
	for r := 0; r < topo.NumRegions(); r++ {
		sim.blocking = append(sim.blocking, topo.BlockingInputs(RegionID(r))...)
	}
	sim.blocking = sortedPartitions(sim.blocking)
	return sim
}

func (sim *simulation) deploy(rs []RegionID) {
	t, topo := sim.t, sim.topo
	if !slices.IsSorted(rs) {
		t.Fatalf("%s: deployed regions %v not sorted", sim.name, rs)
	}
	now := map[RegionID]bool{}
	for _, r := range rs {
		if sim.deployed[r] {
			t.Fatalf("%s: region %s deployed twice", sim.name, fmtRegions(topo, []RegionID{r}))
		}
		now[r] = true
	}
	for _, r := range rs {
		for _, p := range topo.BlockingInputs(r) {
			pr, _ := topo.RegionOf(p.Producer)
			if !sim.finished[p] && sim.group[pr] != sim.group[r] {
				t.Fatalf("%s: region %s deployed before its input %s", sim.name, fmtRegions(topo, []RegionID{r}), p)
			}
		}
		for _, e := range topo.Graph().Edges {
			if e.PartitionType != graph.PipelinedApproximate {
				continue
			}
			topo.eachConnection(e, func(p, c int) {
				rp, rc := topo.regionOf[p], topo.regionOf[c]
				up := func(x RegionID) bool { return now[x] || sim.deployed[x] }
				if (rp == r || rc == r) && !(up(rp) && up(rc)) {
					t.Fatalf("%s: region %s deployed apart from its reconnectable peers", sim.name, fmtRegions(topo, []RegionID{r}))
				}
			})
		}
	}
	for _, r := range rs {
		sim.deployed[r] = true
	}
}

// run reports finished partitions until no deployed producer has one left, then checks everything is deployed.
func (sim *simulation) run() {
	for progress := true; progress; {
		progress = false
		for _, p := range sim.blocking {
			pr, _ := sim.topo.RegionOf(p.Producer)
			if sim.finished[p] || !sim.deployed[pr] {
				continue
			}
			sim.finished[p] = true
			sim.deploy(sim.s.OnResultFinished(p.Result, p.Producer))
			progress = true
		}
	}
	for r, d := range sim.deployed {
		if !d {
			sim.t.Fatalf("%s: region %s never deployed", sim.name, fmtRegions(sim.topo, []RegionID{RegionID(r)}))
		}
	}
}

func (sim *simulation) restart(rs []RegionID) {
	for _, r := range rs {
		sim.deployed[r] = false
		for _, m := range sim.topo.Members(r) {
			for p := range sim.finished {
				if p.Producer == m {
					delete(sim.finished, p)
				}
			}
		}
	}
	got := sim.s.OnRegionsRestarted(rs)
	for _, r := range got {
		if !slices.Contains(rs, r) {
			sim.t.Fatalf("%s: restart deployed region %d that did not restart", sim.name, r)
		}
	}
	sim.deploy(got)
}

// TestPipelinedRegionSchedulingExhaustive runs every small job to completion, then fails every subtask in
// turn under region (and, for approximate jobs, approximate) failover and runs the job to completion again.
func TestPipelinedRegionSchedulingExhaustive(t *testing.T) {
	for _, approx := range []bool{false, true} {
		enumerate(t, approx, func(name string, jg *graph.JobGraph) {
			topo := ComputeRegions(jg)
			sim := newSimulation(t, name, topo)
			sim.deploy(sim.s.Start())
			sim.run()
			modes := []FailoverMode{RegionFailover}
			if approx {
				modes = append(modes, ApproximateFailover)
			}
			for _, m := range modes {
				fs, err := NewFailoverStrategy(m, topo, nil)
				if err != nil {
					continue // approximate failover over bounded edges
				}
				for _, s := range jg.Subtasks() {
					sim.restart(topo.RegionsOf(fs.TasksToRestart(s)))
					sim.run()
				}
			}
		})
	}
}

func TestSchedulingUnknownInputs(t *testing.T) {
	topo := ComputeRegions(boundedJob.build(t))
	s, _ := NewSchedulingStrategy(PipelinedRegionScheduling, topo)
	s.Start()
	if got := s.OnResultFinished(0, ident.Subtask{Vertex: 9}); got != nil {
		t.Errorf("unknown producer: %v", got)
	}
	if got := s.OnRegionsRestarted([]RegionID{-1, 99}); got != nil {
		t.Errorf("unknown regions: %v", got)
	}
	if got := fmt.Sprint(s.OnRegionsRestarted([]RegionID{1, 1, 0})); got != "[0 1]" {
		t.Errorf("duplicate regions: %v", got)
	}
}
