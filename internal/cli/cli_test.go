package cli

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

// The jobs of this file's tests; Build is never reached.
func init() {
	for _, name := range []string{"alpha", "beta"} {
		Register(Job{Name: name, Description: name + " job", Defaults: Settings{Parallelism: 2, MaxParallelism: 128, TaskManagers: 1,
			Chaining: true, CheckpointMode: "exactly-once", Failover: "region", StateBackend: "memory", ExchangeMode: "pipelined",
			Scheduling: "pipelined-region"},
			Define: func(fs *pflag.FlagSet) Build {
				fs.Int("n", 1, "a flag of the job")
				return func(context.Context, Settings, Local, []string) (*Built, error) {
					return nil, errors.New("not built here")
				}
			}})
	}
}

// TestJobWord: the job is the first word, or the first that the flags of a run leave as an argument.
func TestJobWord(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"alpha"}, 0},
		{[]string{"beta", "--n", "3"}, 0},
		{[]string{"--jobmanager", "127.0.0.1:1", "beta", "--n", "3"}, 2},
		{[]string{"--parallelism=3", "alpha"}, 1},
		{[]string{"--report", "alpha"}, -1}, // the report's file is called alpha
		{[]string{"--", "alpha"}, -1},
		{[]string{"gamma"}, -1},
		{nil, -1},
	} {
		if got := jobWord(tc.args); got != tc.want {
			t.Errorf("jobWord(%q) = %d, want %d", tc.args, got, tc.want)
		}
	}
}

// TestWireArgs: submit sends the flags the user set, but the client's, and the free arguments after
// "--"; parsed again as a cluster's process does, they give the client's settings and job flags.
func TestWireArgs(t *testing.T) {
	job, _ := Lookup("alpha")
	client := newRunFlagSet("submit", job)
	args := []string{"--parallelism", "3", "--jobmanager", "127.0.0.1:1", "--report", "r.json", "--inject-failure", "map[0]@1",
		"--no-chaining", "--inject-failure", "map[1]@2", "--n", "4", "--tls-ca", "ca.pem", "free", "--", "--also-free"}
	if err := parse(client.fs, args); err != nil {
		t.Fatal(err)
	}
	wire := wireArgs(client.fs, client.fs.Args())
	want := []string{"--inject-failure=map[0]@1", "--inject-failure=map[1]@2", "--n=4", "--no-chaining=true", "--parallelism=3",
		"--", "free", "--also-free"}
	if !slices.Equal(wire, want) {
		t.Fatalf("wire args %q, want %q", wire, want)
	}
	worker := newRunFlagSet("", job)
	if err := parse(worker.fs, wire); err != nil {
		t.Fatal(err)
	}
	if c, w := settings(client.fs, client.settings), settings(worker.fs, worker.settings); !reflect.DeepEqual(c, w) {
		t.Fatalf("the worker's settings %+v differ from the client's %+v", w, c)
	}
	if n, _ := worker.fs.GetInt("n"); n != 4 {
		t.Fatalf("the job's flag came out %d", n)
	}
	if !slices.Equal(worker.fs.Args(), []string{"free", "--also-free"}) {
		t.Fatalf("free arguments %q", worker.fs.Args())
	}
}

// TestRegisterRefusesClashingFlags: a job flag named like a flag of every run is refused when registered.
func TestRegisterRefusesClashingFlags(t *testing.T) {
	defer func() {
		if p, _ := recover().(string); p != `runnel.Register("clash"): its flag --checkpoint-interval is a flag of every run (take a checkpoint this often (0: checkpointing off)): choose other names` {
			t.Fatalf("panic %q", p)
		}
	}()
	Register(Job{Name: "clash", Define: func(fs *pflag.FlagSet) Build {
		fs.Duration("checkpoint-interval", 0, "")
		return nil
	}})
}
