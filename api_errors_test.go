package runnel_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel"
	"github.com/runnel-dev/runnel/connector"
)

// here returns "file.go:line" of its caller, as the engine's error messages name the user's calls.
func here() string {
	_, file, line, _ := runtime.Caller(1)
	return fmt.Sprintf("%s:%d", filepath.Base(file), line)
}

// TestMissingCodecNamesFileAndLine pins the README's promise for a record type without a codec on a network
// edge: the error names the operator whose output crosses the network and the file:line of the API call
// that built it, however the edge comes to cross a task boundary.
func TestMissingCodecNamesFileAndLine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []runnel.Option
		build func(env *runnel.Environment) string
	}{
		{"rebalance", nil, func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m, at := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk"), here()
			m.Rebalance().SinkTo(connector.Discard[unencodable]())
			return at
		}},
		{"no chaining", []runnel.Option{runnel.WithChaining(false)}, func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m, at := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk"), here()
			m.SinkTo(connector.Discard[unencodable]())
			return at
		}},
		{"parallelism changes", nil, func(env *runnel.Environment) string {
			src := runnel.FromSource(env, connector.Collection(seq(3)))
			m, at := runnel.Map(src, func(v int64) (unencodable, error) { return unencodable{}, nil }).Name("mk"), here()
			m.SinkTo(connector.Discard[unencodable]()).SetParallelism(2)
			return at
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := runnel.NewEnvironment(tc.opts...)
			at := tc.build(env)
			_, err := env.Execute(context.Background(), "no codec")
			if err == nil {
				t.Fatal("the job ran without a codec on a network edge")
			}
			for _, want := range []string{`operator "mk"`, "needs a codec", "created at", at} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// lateState declares its state in ProcessElement instead of Open.
type lateState struct {
	runnel.KeyedProcessBase[int64, int64]
}

func (lateState) ProcessElement(ctx runnel.KeyedContext[int64], v int64, out runnel.Collector[int64]) error {
	total, err := runnel.NewValueState[int64](ctx, "total")
	if err != nil {
		return err
	}
	sum, _ := total.Value()
	total.Update(sum + v)
	out.Collect(sum + v)
	return nil
}

// TestStateDeclaredOutsideOpen pins the message for keyed state declared in ProcessElement: it names the
// state and the operator and says that state is declared in Open, at the first record (before, the first
// record declared it and the second failed with "registered twice"), with either state backend.
func TestStateDeclaredOutsideOpen(t *testing.T) {
	for _, backend := range []string{"memory", "pebble"} {
		t.Run(backend, func(t *testing.T) {
			env := runnel.NewEnvironment(runnel.WithLogger(quiet), runnel.WithStateBackend(backend))
			src := runnel.FromSource(env, connector.Collection(seq(10)))
			sums := runnel.Process(runnel.KeyBy(src, func(v int64) int64 { return v % 2 }),
				func() runnel.KeyedProcessFunction[int64, int64, int64] { return lateState{} }).Name("late")
			sums.SinkTo(connector.Discard[int64]())
			_, err := env.Execute(context.Background(), "late state")
			if err == nil {
				t.Fatal("the job ran with state declared in ProcessElement")
			}
			for _, want := range []string{`value state "total"`, `operator "late"`, "must be declared in Open"} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "twice") {
				t.Fatalf("error %q blames a second declaration", err)
			}
		})
	}
}
