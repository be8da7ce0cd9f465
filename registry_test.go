package runnel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
	"github.com/runnel-dev/runnel/examples"
	"github.com/runnel-dev/runnel/examples/sequence"
)

// The jobs of this file are registered once per test binary, as a program registers its jobs.
const (
	registrySequence = "registry-sequence" // the sequence checker, built from its flags
	registryCounter  = "registry-counter"  // a build whose graph depends on a global counter
	registryFailing  = "registry-failing"  // a build that returns an error
	registryPanics   = "registry-panics"   // a build that panics
	registryNil      = "registry-nil"      // a define that returns no Job
	registryInvalid  = "registry-invalid"  // a build of a job without operators
)

// sequenceJobs maps each Environment the registry-sequence build made to its sequence.Job, whose Checker
// reads the sink the Environment's accumulator holds.
var sequenceJobs sync.Map

// buildCount is what registry-counter's graph depends on.
var buildCount atomic.Int64

func init() {
	runnel.RegisterJob(registrySequence, "the sequence checker", func(fs *pflag.FlagSet) runnel.Job {
		job := sequence.New(fs)
		return runnel.BuildFunc(func(env *runnel.Environment, _ []string) error {
			if err := job.Build(env, examples.Options{}); err != nil {
				return err
			}
			sequenceJobs.Store(env, job)
			return nil
		})
	}, runnel.WithParallelism(2), runnel.WithTaskManagers(2), runnel.WithRestartStrategy("fixed-delay:attempts=3,delay=10ms"))
	runnel.Register(registryCounter, "a build that reads a global", func(env *runnel.Environment, _ []string) error {
		src := runnel.FromSource(env, connector.Collection([]int64{1, 2, 3})).Name("numbers")
		// The mistake: the shape reads a global, so every process (and every call) builds another job.
		n := buildCount.Add(1)
		mapped := runnel.Map(src, func(v int64) (int64, error) { return v, nil }).Name(fmt.Sprintf("map-%d", n))
		mapped.SinkTo(connector.NewCollect[int64]()).Name("collect")
		return nil
	})
	runnel.Register(registryFailing, "a build that fails", func(_ *runnel.Environment, args []string) error {
		return fmt.Errorf("unknown word %s", args[0])
	})
	runnel.Register(registryPanics, "a build that panics", func(*runnel.Environment, []string) error { panic("the build fell over") })
	runnel.RegisterJob(registryNil, "a define that returns no job", func(*pflag.FlagSet) runnel.Job { return nil })
	runnel.Register(registryInvalid, "a job without operators", func(*runnel.Environment, []string) error { return nil })
}

// TestRegisterRefusesBadNames: Register panics, with a message that says why, on a name registered twice
// and on names no command line could select; the jobs registered are listed sorted.
func TestRegisterRefusesBadNames(t *testing.T) {
	build := func(*runnel.Environment, []string) error { return nil }
	cases := []struct {
		name     string
		register func()
		job      string
		want     string
	}{
		{"twice", func() { runnel.Register(registrySequence, "", build) }, registrySequence,
			`runnel.Register: job "registry-sequence" is registered twice; job names must be unique in a binary`},
		{"empty", func() { runnel.Register("", "", build) }, "", `runnel.Register(""): a job needs a name`},
		{"a role", func() { runnel.Register("submit", "", build) }, "submit",
			`runnel.Register("submit"): "submit" is a role of runnel.Main (run, submit, cancel, jobmanager, taskmanager, help) and cannot name a job`},
		{"help", func() { runnel.Register("help", "", build) }, "help", `"help" is a role of runnel.Main`},
		{"a flag", func() { runnel.Register("-x", "", build) }, "-x", "must not start with '-' or hold white space"},
		{"white space", func() { runnel.Register("my job", "", build) }, "my job", "must not start with '-' or hold white space"},
		{"two lines", func() { runnel.Register("registry-lines", "one\ntwo", build) }, "registry-lines", "the description must be one line"},
		{"nil build", func() { runnel.Register("registry-nil-build", "", nil) }, "registry-nil-build", `runnel.Register("registry-nil-build"): build is nil`},
		{"nil define", func() { runnel.RegisterJob("registry-nil-define", "", nil) }, "registry-nil-define", `runnel.RegisterJob("registry-nil-define"): define is nil`},
		{"a flag of every run", func() {
			runnel.RegisterJob("registry-clash", "", func(fs *pflag.FlagSet) runnel.Job {
				fs.Int("parallelism", 1, "")
				fs.Bool("help", false, "")
				return runnel.BuildFunc(build)
			})
		}, "registry-clash", "its flag --help takes the place of --help (-h); its flag --parallelism is a flag of every run (default parallelism of the job's operators): choose other names"},
		{"a flag of submit", func() {
			runnel.RegisterJob("registry-clash-submit", "", func(fs *pflag.FlagSet) runnel.Job {
				fs.String("jobmanager", "", "")
				return runnel.BuildFunc(build)
			})
		}, "registry-clash-submit", "its flag --jobmanager is a flag of every run"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				p := recover()
				if s, ok := p.(string); !ok || !strings.Contains(s, tc.want) {
					t.Fatalf("panic %v, want one saying %q", p, tc.want)
				}
				if tc.job != registrySequence && runnel.LookupJob(tc.job) {
					t.Fatalf("%q was registered all the same", tc.job)
				}
			}()
			tc.register()
		})
	}
	jobs := runnel.RegisteredJobs()
	if !slices.IsSorted(jobs) {
		t.Fatalf("RegisteredJobs not sorted: %v", jobs)
	}
	for _, name := range []string{registrySequence, registryCounter, registryFailing, registryPanics, registryNil, registryInvalid} {
		if !slices.Contains(jobs, name) {
			t.Fatalf("RegisteredJobs %v lacks %q", jobs, name)
		}
	}
}

// TestBuildRegisteredErrorsNameTheJob: every way a registered build can go wrong is an error that names
// the job and the problem; a panicking build does not take the process down.
func TestBuildRegisteredErrorsNameTheJob(t *testing.T) {
	cases := []struct {
		job  string
		args []string
		want []string
	}{
		{"nobody", nil, []string{`job "nobody" is not registered in this binary; registered: `, registryCounter + ", " + registryFailing}},
		{registryFailing, []string{"--", "--bogus"}, []string{`job "registry-failing": building it from its arguments ["--bogus"]: unknown word --bogus`}},
		{registryFailing, []string{"--bogus"}, []string{`job "registry-failing": registry-failing: unknown flag: --bogus`}},
		{registrySequence, []string{"--parallelism=x"}, []string{`job "registry-sequence": registry-sequence: invalid argument "x" for "--parallelism" flag`}},
		{registrySequence, []string{"--failover=some"}, []string{`job "registry-sequence": invalid --failover "some": use full, region, approximate or task`}},
		{registryPanics, nil, []string{`job "registry-panics": building it from its arguments []: the build panicked: the build fell over`, "registry_test.go"}},
		{registryNil, nil, []string{`job "registry-nil": its define function returned no Job`}},
		{registryInvalid, nil, []string{`job "registry-invalid": job "registry-invalid" has no operators`}},
		{registrySequence, []string{"--keys=1"}, []string{`job "registry-sequence": building it from its arguments []: --keys 1 is less than the parallelism 2`}},
		{registrySequence, []string{"--inject-failure=nothing[0]@5"}, []string{`job "registry-sequence": WithFailureInjection "nothing[0]@5": no operator is named "nothing"`}},
	}
	for _, tc := range cases {
		t.Run(tc.job+strings.Join(tc.args, ""), func(t *testing.T) {
			_, _, err := runnel.BuildRegistered(context.Background(), tc.job, tc.args)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want one saying %q", err, w)
				}
			}
		})
	}
}

// TestAccumulatorMistakesAreReported: RegisterAccumulator's mistakes are build mistakes, which Execute
// returns naming the accumulator; merging values of a name the build does not have is an error too.
func TestAccumulatorMistakesAreReported(t *testing.T) {
	cases := []struct {
		name     string
		register func(env *runnel.Environment, a runnel.Accumulator)
		want     string
	}{
		{"twice", func(env *runnel.Environment, a runnel.Accumulator) {
			runnel.RegisterAccumulator(env, "a", a)
			runnel.RegisterAccumulator(env, "a", a)
		}, `RegisterAccumulator("a"): an accumulator of that name is already registered in this job`},
		{"no name", func(env *runnel.Environment, a runnel.Accumulator) { runnel.RegisterAccumulator(env, "", a) },
			"RegisterAccumulator: an accumulator needs a name"},
		{"nil", func(env *runnel.Environment, _ runnel.Accumulator) { runnel.RegisterAccumulator(env, "a", nil) },
			`RegisterAccumulator("a"): the accumulator is nil`},
		{"too many", func(env *runnel.Environment, a runnel.Accumulator) {
			for i := 0; i <= runnel.MaxAccumulators; i++ {
				runnel.RegisterAccumulator(env, fmt.Sprint(i), a)
			}
		}, fmt.Sprintf(`RegisterAccumulator("%d"): a job has at most %d accumulators`, runnel.MaxAccumulators, runnel.MaxAccumulators)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment()
			runnel.FromSource(env, connector.Collection([]int64{1})).SinkTo(connector.NewCollect[int64]())
			tc.register(env, &maxAccumulator{})
			_, err := env.Execute(context.Background(), "accumulators")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
	env := runnel.NewEnvironment()
	runnel.RegisterAccumulator(env, "max", &maxAccumulator{})
	err := runnel.MergeAccumulators(env, map[string][]byte{"max": {7}, "other": {1}, "short": nil})
	for _, w := range []string{`accumulator "other" is not registered in this build of the job (registered: [max])`, `accumulator "short" is not registered`} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("err = %v, want one saying %q", err, w)
		}
	}
	if vals, err := runnel.EncodeAccumulators(env); err != nil || vals["max"][0] != 7 {
		t.Fatalf("the known accumulator was not merged beside the unknown ones: %v %v", vals, err)
	}
	if err := runnel.MergeAccumulators(env, map[string][]byte{"max": nil}); err == nil || !strings.Contains(err.Error(), `accumulator "max": merging: want one byte`) {
		t.Fatalf("bad bytes: err = %v", err)
	}
}

// maxAccumulator is the smallest join: the maximum of the bytes merged.
type maxAccumulator struct{ v byte }

func (m *maxAccumulator) EncodeAccumulator() ([]byte, error) { return []byte{m.v}, nil }
func (m *maxAccumulator) MergeAccumulator(b []byte) error {
	if len(b) != 1 {
		return errors.New("want one byte")
	}
	m.v = max(m.v, b[0])
	return nil
}

func sequenceJobOf(t *testing.T, env *runnel.Environment) *sequence.Job {
	t.Helper()
	j, ok := sequenceJobs.Load(env)
	if !ok {
		t.Fatal("the Environment was not made by the registry-sequence build")
	}
	return j.(*sequence.Job)
}

// TestTaskManagersBuildTheJobFromTheRegistry is the in-process proof of "the same build on both sides": the
// sequence checker with checkpoints and a failure injected into its keyed check operator runs once with
// plain Execute, and once as a cluster runs it, every task running the operators of a second build of the
// job from the registry (the TaskManagers' build), whose sink accumulator is then merged into the first
// build's (the submitting process's). Both runs give the same exactly-once checker and the same failover.
func TestTaskManagersBuildTheJobFromTheRegistry(t *testing.T) {
	const records, keys = 20_000, 8
	args := []string{fmt.Sprintf("--records=%d", records), fmt.Sprintf("--keys=%d", keys), "--rate=20000",
		"--checkpoint-interval=30ms", "--inject-failure=check[0]@3000"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := sequence.Checker{Records: records, Keys: keys, ExpectedRecords: records, Verdict: sequence.VerdictOK}
	failed := func(res *runnel.JobResult) string {
		if len(res.Failovers) != 1 {
			t.Fatalf("failovers %+v, want 1", res.Failovers)
		}
		return res.Failovers[0].Failed
	}

	plain, _, err := runnel.BuildRegistered(ctx, registrySequence, args)
	if err != nil {
		t.Fatal(err)
	}
	res, err := plain.Execute(ctx, registrySequence)
	if err != nil {
		t.Fatal(err)
	}
	if c := sequenceJobOf(t, plain).Checker(res); c != want {
		t.Fatalf("plain Execute: checker %+v, want %+v", c, want)
	}
	plainFailed := failed(res)

	submitted, sp, err := runnel.BuildRegistered(ctx, registrySequence, args)
	if err != nil {
		t.Fatal(err)
	}
	workers, wp, err := runnel.BuildVerified(ctx, registrySequence, args, sp.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	runnel.RunChainsFrom(submitted, wp)
	res, err = submitted.Execute(ctx, registrySequence)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := sequenceJobOf(t, submitted), sequenceJobOf(t, workers)
	if n := len(mine.Latest()); n != 0 {
		t.Fatalf("the submitting build's sink saw %d keys: the tasks did not run the other build's operators", n)
	}
	if len(theirs.Latest()) != keys {
		t.Fatalf("the workers' sink saw %d keys, want %d", len(theirs.Latest()), keys)
	}
	if got := runnel.FiredInjections(sp); got[0] {
		t.Fatal("the submitting build's injection fired: the tasks ran its operators")
	}
	if got := runnel.FiredInjections(wp); !got[0] {
		t.Fatal("the workers' injection did not fire")
	}
	if names := runnel.AccumulatorNames(submitted); !slices.Equal(names, []string{sequence.SinkAccumulator}) {
		t.Fatalf("accumulators %v", names)
	}
	values, err := runnel.EncodeAccumulators(workers)
	if err != nil {
		t.Fatal(err)
	}
	// Values are re-sent in a cluster: merging twice must change nothing.
	for range 2 {
		if err := runnel.MergeAccumulators(submitted, values); err != nil {
			t.Fatal(err)
		}
		if c := mine.Checker(res); c != want {
			t.Fatalf("after merging the workers' accumulators: checker %+v, want %+v", c, want)
		}
	}
	if f := failed(res); f != plainFailed {
		t.Fatalf("failover of %s, plain Execute's of %s", f, plainFailed)
	}
}

// TestNondeterministicBuildIsRefused: a build whose graph depends on something other than its arguments
// (here a global counter) gives another fingerprint on every call; verifying a second build against the
// first fails naming the job and the cause, and Execute refuses to run such a second build's operators.
func TestNondeterministicBuildIsRefused(t *testing.T) {
	ctx := context.Background()
	first, fp, err := runnel.BuildRegistered(ctx, registryCounter, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, again, err := runnel.BuildRegistered(ctx, registryCounter, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Fingerprint == fp.Fingerprint {
		t.Fatal("two builds with different graphs have one fingerprint")
	}
	const wantMsg = "the job's build function depends on something other than its arguments"
	_, _, err = runnel.BuildVerified(ctx, registryCounter, nil, fp.Fingerprint)
	if err == nil || !strings.Contains(err.Error(), `job "registry-counter": built from the same arguments, its job graph differs`) ||
		!strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("BuildVerified: err = %v", err)
	}
	runnel.RunChainsFrom(first, again)
	if _, err := first.Execute(ctx, registryCounter); err == nil || !strings.Contains(err.Error(), wantMsg) {
		t.Fatalf("Execute with the chains of a different build: err = %v", err)
	}
	// A deterministic job verifies against itself.
	_, sp, err := runnel.BuildRegistered(ctx, registrySequence, []string{"--records=10"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runnel.BuildVerified(ctx, registrySequence, []string{"--records=10"}, sp.Fingerprint); err != nil {
		t.Fatalf("the same arguments: %v", err)
	}
	if _, _, err := runnel.BuildVerified(ctx, registrySequence, []string{"--records=10", "--parallelism=3", "--keys=16"}, sp.Fingerprint); err == nil {
		t.Fatal("other arguments (parallelism 3) verified against parallelism 2's fingerprint")
	}
}

// TestInjectionsFollowTheJobMastersFiredSet: before a TaskManager builds an attempt of a subtask, the
// injections of that subtask in its build are fired exactly when the job master's fired set (carried in the
// deployment) holds them: one fired elsewhere never fires here, one the job master left out (it fired in an
// attempt a failover was stopping already) fires again; injections of other subtasks are left alone.
func TestInjectionsFollowTheJobMastersFiredSet(t *testing.T) {
	args := []string{"--records=100", "--inject-failure=check[0]@3000", "--inject-failure=map[1]@2000", "--inject-failure=map[0]@10"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, wp, err := runnel.BuildRegistered(ctx, registrySequence, args)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		operator string
		sub      int
		fired    []int
		want     []bool
	}{
		{"check", 0, []int{0, 1}, []bool{true, false, false}}, // map[1] is not check[0]'s
		{"map", 1, []int{0, 1}, []bool{true, true, false}},
		{"map", 0, []int{0, 1}, []bool{true, true, false}}, // map[0]'s own injection is not in the set
		{"check", 0, nil, []bool{false, true, false}},      // left out: it fires again
		{"map", 1, []int{2}, []bool{false, false, false}},
		{"map", 0, []int{2}, []bool{false, false, true}},
	} {
		if got := runnel.SyncInjections(wp, step.operator, step.sub, step.fired...); !slices.Equal(got, step.want) {
			t.Fatalf("after a deployment of %s[%d] with fired %v: fired %v, want %v", step.operator, step.sub, step.fired, got, step.want)
		}
	}
}

// TestInjectionsFireInABuildOfTheirOwn runs the tasks from another build of the job, as a TaskManager
// process does, with injections on two subtasks: each fires once and makes a failover of its own, also when
// one strikes while the failover of the other stops its subtask (the job master learns which one fired from
// the index in the failure, and leaves such a one out of its fired set, so it fires again).
func TestInjectionsFireInABuildOfTheirOwn(t *testing.T) {
	const records, keys = 20_000, 8
	args := []string{fmt.Sprintf("--records=%d", records), fmt.Sprintf("--keys=%d", keys), "--rate=20000",
		"--checkpoint-interval=30ms", "--inject-failure=check[0]@3000", "--inject-failure=map[1]@2000"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	submitted, sp, err := runnel.BuildRegistered(ctx, registrySequence, args)
	if err != nil {
		t.Fatal(err)
	}
	workers, wp, err := runnel.BuildVerified(ctx, registrySequence, args, sp.Fingerprint)
	if err != nil {
		t.Fatal(err)
	}
	runnel.RunChainsFrom(submitted, wp)
	res, err := submitted.Execute(ctx, registrySequence)
	if err != nil {
		t.Fatal(err)
	}
	var causes []string
	for _, f := range res.Failovers {
		causes = append(causes, f.Cause[strings.LastIndex(f.Cause, "injected failure"):])
	}
	slices.Sort(causes)
	if want := []string{"injected failure check[0]@3000", "injected failure map[1]@2000"}; !slices.Equal(causes, want) {
		t.Fatalf("failovers %+v, want one of each of %q", res.Failovers, want)
	}
	values, err := runnel.EncodeAccumulators(workers)
	if err != nil {
		t.Fatal(err)
	}
	if err := runnel.MergeAccumulators(submitted, values); err != nil {
		t.Fatal(err)
	}
	want := sequence.Checker{Records: records, Keys: keys, ExpectedRecords: records, Verdict: sequence.VerdictOK}
	if c := sequenceJobOf(t, submitted).Checker(res); c != want {
		t.Fatalf("checker %+v, want %+v", c, want)
	}
}
