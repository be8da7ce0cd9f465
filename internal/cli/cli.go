// Package cli is the command line of every Runnel binary (runnel.Main): the bundled runnel command and a
// user's own job binary are the same program with different jobs registered. It holds the registry of
// jobs and extra commands, picks the role the first argument names (run, submit, cancel, jobmanager,
// taskmanager), parses the flags of a run (the engine's and the job's own), builds the job through the
// build the root package registered, runs it in process or on a cluster while showing its progress, and
// maps the outcome to an exit code. It must not import the root package, which calls it.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Exit codes of Main (docs/cluster.md §2.1).
const (
	// ExitOK: the job finished, ran for its --duration, or a daemon was stopped.
	ExitOK = 0
	// ExitFailed: the job failed or was cancelled, or an error while running.
	ExitFailed = 1
	// ExitUsage: a mistake in the command line or configuration, found before anything ran.
	ExitUsage = 2
)

// usageErr marks a mistake in the command line.
type usageErr struct{ error }

func (e usageErr) Unwrap() error { return e.error }

// exitErr carries an exit code of its own (a signal's).
type exitErr struct {
	code int
	error
}

func (e exitErr) Unwrap() error { return e.error }

// Main runs the command line args of a program with the jobs and commands registered in it (engine are
// the engine's defaults of the flags of a run, which the help shows), writing to stdout and stderr, and returns the exit code. Signals stop what it runs: SIGINT or SIGTERM cancel a job
// (a second one ends the process) and stop a daemon.
func Main(ctx context.Context, engine Settings, args []string, stdout, stderr io.Writer) int {
	err := dispatch(ctx, engine, args, stdout, stderr)
	return exitCode(stderr, err)
}

// exitCode reports err on stderr and returns its exit code.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, errCode) {
		var ce codeErr
		errors.As(err, &ce)
		return ce.code
	}
	fmt.Fprintf(stderr, "%s: %v\n", progName(), err)
	if ee := (exitErr{}); errors.As(err, &ee) {
		return ee.code
	}
	if ue := (usageErr{}); errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitFailed
}

// codeErr is the exit code of a command that reported its own errors.
type codeErr struct{ code int }

var errCode = errors.New("exit code")

func (e codeErr) Error() string        { return fmt.Sprintf("exit code %d", e.code) }
func (e codeErr) Is(target error) bool { return target == errCode }

func dispatch(ctx context.Context, engine Settings, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		usage(stdout, engine)
		return nil
	}
	switch args[0] {
	case "run":
		return mainRun(ctx, engine, "run", args[1:], stdout, stderr)
	case "submit":
		return mainRun(ctx, engine, "submit", args[1:], stdout, stderr)
	case "cancel":
		return mainCancel(ctx, args[1:], stdout, stderr)
	case "jobmanager":
		return mainJobManager(ctx, args[1:], stdout, stderr)
	case "taskmanager":
		return mainTaskManager(ctx, args[1:], stdout, stderr)
	}
	if c, ok := lookupCommand(args[0]); ok {
		if code := c.Run(ctx, args[1:], stdout, stderr); code != 0 {
			return codeErr{code}
		}
		return nil
	}
	if _, ok := Lookup(args[0]); ok || strings.HasPrefix(args[0], "-") {
		// "myjob clicks ..." and, with one job, "myjob --parallelism 3" mean run.
		return mainRun(ctx, engine, "run", args, stdout, stderr)
	}
	return usageErr{fmt.Errorf("%q is neither a role nor a job of this program (%s --help lists them)", args[0], progName())}
}

func isHelp(arg string) bool { return arg == "-h" || arg == "--help" || arg == "help" }

// usage writes what the program can do: its roles, its jobs, its commands and the flags of a run.
func usage(w io.Writer, engine Settings) {
	prog := progName()
	fmt.Fprintf(w, `Usage:
  %[1]s run [JOB] [FLAGS] [-- JOB-ARGS]    run a job in this process (an embedded cluster)
  %[1]s submit [JOB] --jobmanager HOST:PORT [FLAGS] [-- JOB-ARGS]
                                        run a job on a cluster and follow it to its end
  %[1]s cancel JOBID --jobmanager HOST:PORT [--savepoint DIR]
                                        stop a job that runs on a cluster
  %[1]s jobmanager [FLAGS]                 run a JobManager
  %[1]s taskmanager --jobmanager HOST:PORT [FLAGS]
                                        run a TaskManager
  %[1]s JOB [FLAGS] [-- JOB-ARGS]          the same as run JOB

JOB may be left out when the program has one job. JOB-ARGS, and words that are not flags, go to the
job's build; "%[1]s run JOB --help" shows the job's own flags, "%[1]s ROLE --help" a role's.
Every process of a cluster must run this same program.
`, prog)
	names := Names()
	if len(names) == 0 {
		fmt.Fprintln(w, "\nNo job is registered in this program.")
	} else {
		fmt.Fprintln(w, "\nJobs:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, n := range names {
			j, _ := Lookup(n)
			fmt.Fprintf(tw, "  %s\t%s\n", n, j.Description)
		}
		tw.Flush()
	}
	if cmds := commands(); len(cmds) > 0 {
		fmt.Fprintln(w, "\nCommands:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range cmds {
			fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Short)
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nFlags of run and submit (every job has them; JOB --help shows its defaults):\n%s", runFlagUsages(engine))
	fmt.Fprint(w, exitCodes)
}

// exitCodes is the help's paragraph on exit codes.
const exitCodes = `
Exit codes: 0 the job finished (or ran for its --duration), a daemon was stopped; 1 the job failed or was
cancelled, or an error while running; 2 a mistake in the command line or configuration, found before
anything ran; 130 / 143 the job was stopped by SIGINT / SIGTERM (after it was cancelled cleanly).
`

func progName() string {
	if len(os.Args) > 0 {
		return filepath.Base(os.Args[0])
	}
	return "runnel"
}

// pickJob returns the job args name and the arguments without its name. The name is the first word, or
// the first word that is not a flag or a flag's value ("submit --jobmanager HOST:PORT sequence"); with
// one job registered it may be left out.
func pickJob(args []string) (Job, []string, error) {
	if i := jobWord(args); i >= 0 {
		j, _ := Lookup(args[i])
		return j, append(args[:i:i], args[i+1:]...), nil
	}
	names := Names()
	switch {
	case len(names) == 1:
		j, _ := Lookup(names[0])
		return j, args, nil
	case len(names) == 0:
		return Job{}, nil, usageErr{errors.New("no job is registered in this program: call runnel.Register before runnel.Main")}
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		return Job{}, nil, usageErr{fmt.Errorf("%w (%s --help lists the jobs)", notRegistered(args[0]), progName())}
	}
	return Job{}, nil, usageErr{fmt.Errorf("name the job: the jobs are %s", strings.Join(names, ", "))}
}

// jobWord returns the index in args of the word that names a registered job, or -1: the first word, or
// else the first that the flags of a run leave as an argument (a job's own flags are not known before its
// name, so one of them before the name must be written --flag=value).
func jobWord(args []string) int {
	if len(args) == 0 {
		return -1
	}
	if _, ok := Lookup(args[0]); ok {
		return 0
	}
	fs := takenFlags()
	fs.ParseErrorsAllowlist.UnknownFlags = true
	if fs.Parse(args) != nil || fs.NArg() == 0 {
		return -1
	}
	name := fs.Arg(0)
	if _, ok := Lookup(name); !ok {
		return -1
	}
	for i, a := range args {
		if a == "--" {
			break
		}
		if a == name {
			return i
		}
	}
	return -1
}

// wantsHelp reports whether args ask for help before their "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "-h" || a == "--help" {
			return true
		}
	}
	return false
}
