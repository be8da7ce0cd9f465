package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/report"
)

// Job is a job registered in the binary (runnel.Register and runnel.RegisterJob), as the command line
// sees it.
type Job struct {
	// Name is how command lines name the job.
	Name string
	// Description is the line the program's help shows beside the name.
	Description string
	// Defaults are the job's settings before its command line's flags: the options it was registered
	// with over the engine's defaults. The flags of a run show them as theirs.
	Defaults Settings
	// Define adds the job's own flags to fs and returns the build that reads them once fs is parsed. It
	// is called once for every build, on a FlagSet of its own that holds the flags of a run already.
	Define func(fs *pflag.FlagSet) Build
}

// Build builds a job from the settings of the run, what only the calling process adds (local), and the
// job's free arguments, and compiles it. An error is a mistake in the job or its command line.
type Build func(ctx context.Context, s Settings, local Local, args []string) (*Built, error)

// Local are the parts of a run that only the process that runs or submits the job has.
type Local struct {
	Logger           *slog.Logger
	ProgressInterval time.Duration
	Progress         func(*report.JobResult)
}

// Built is a compiled job and what the job does once it ended.
type Built struct {
	Job *executor.Job
	// End, when not nil, is called once after the job ended, in the process that ran or submitted it,
	// with the job's result: what it writes to w follows the job's output, the fields it returns are added
	// to the --report, and an error makes a run that would have succeeded exit 1.
	End func(w io.Writer, res *report.JobResult) (map[string]any, error)
}

// registry holds the jobs of the binary by name. It is as large as the program's register calls make it
// (they are code, not input), so it needs no bound of its own.
var registry struct {
	mu       sync.Mutex
	jobs     map[string]Job
	commands []Command
}

// Reserved are the first arguments Main reserves for itself: its roles and its help. No job or command
// may be called by one, since "myjob submit" must mean the role.
var Reserved = []string{"run", "submit", "cancel", "jobmanager", "taskmanager", "help"}

// CheckName returns what is wrong with name as the name of a job or command, or nil.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a job needs a name")
	case slices.Contains(Reserved, name):
		return fmt.Errorf("%q is a role of runnel.Main (%s) and cannot name a job", name, strings.Join(Reserved, ", "))
	case strings.HasPrefix(name, "-") || strings.ContainsFunc(name, unicode.IsSpace):
		return fmt.Errorf("a job name must not start with '-' or hold white space: it is given on command lines")
	}
	return nil
}

// Register adds job to the registry. It panics, as defining a flag twice does, when the name is taken or
// the job's flags clash with those of a run: registrations are code, and the mistake is the program's.
func Register(job Job) {
	if err := CheckName(job.Name); err != nil {
		panic(fmt.Sprintf("runnel.Register(%q): %v", job.Name, err))
	}
	if strings.ContainsAny(job.Description, "\r\n") {
		panic(fmt.Sprintf("runnel.Register(%q): the description must be one line: the help shows it beside the name", job.Name))
	}
	if err := checkJobFlags(job); err != nil {
		panic(fmt.Sprintf("runnel.Register(%q): %v", job.Name, err))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, dup := registry.jobs[job.Name]; dup {
		panic(fmt.Sprintf("runnel.Register: job %q is registered twice; job names must be unique in a binary", job.Name))
	}
	if slices.ContainsFunc(registry.commands, func(c Command) bool { return c.Name == job.Name }) {
		panic(fmt.Sprintf("runnel.Register: %q is a command of this program and cannot name a job", job.Name))
	}
	if registry.jobs == nil {
		registry.jobs = map[string]Job{}
	}
	registry.jobs[job.Name] = job
}

// checkJobFlags declares the job's flags once, to refuse a name that a run's flags (or help) already use
// before any command line meets it.
func checkJobFlags(job Job) error {
	own := pflag.NewFlagSet(job.Name, pflag.ContinueOnError)
	job.Define(own)
	taken := takenFlags()
	var errs []string
	own.VisitAll(func(f *pflag.Flag) {
		switch {
		case taken.Lookup(f.Name) != nil:
			errs = append(errs, fmt.Sprintf("its flag --%s is a flag of every run (%s)", f.Name, firstLine(taken.Lookup(f.Name).Usage)))
		case f.Name == "help" || f.Shorthand == "h":
			errs = append(errs, fmt.Sprintf("its flag --%s takes the place of --help (-h)", f.Name))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("%s: choose other names", strings.Join(errs, "; "))
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Command is a command of a program besides the roles (the runnel binary's bench and examples).
type Command struct {
	Name  string
	Short string
	// Run runs the command with the arguments after its name and returns the exit code.
	Run func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// AddCommand adds a command to the program's command line. It panics when the name is reserved or taken.
func AddCommand(c Command) {
	if err := CheckName(c.Name); err != nil {
		panic(fmt.Sprintf("cli.AddCommand(%q): %v", c.Name, err))
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if _, taken := registry.jobs[c.Name]; taken || slices.ContainsFunc(registry.commands, func(o Command) bool { return o.Name == c.Name }) {
		panic(fmt.Sprintf("cli.AddCommand(%q): the name is taken", c.Name))
	}
	registry.commands = append(registry.commands, c)
}

// Names returns the names of the registered jobs, sorted.
func Names() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	names := make([]string, 0, len(registry.jobs))
	for n := range registry.jobs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the job registered as name.
func Lookup(name string) (Job, bool) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	j, ok := registry.jobs[name]
	return j, ok
}

func commands() []Command {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return slices.Clone(registry.commands)
}

func lookupCommand(name string) (Command, bool) {
	for _, c := range commands() {
		if c.Name == name {
			return c, true
		}
	}
	return Command{}, false
}

// notRegistered is the error for a job name the binary does not know.
func notRegistered(name string) error {
	registered := "none"
	if names := Names(); len(names) > 0 {
		registered = strings.Join(names, ", ")
	}
	return fmt.Errorf("job %q is not registered in this binary; registered: %s", name, registered)
}
