package runnel

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Accumulator is a value tasks build up wherever they run, read by the submitting process when the job
// ends (a sink that keeps results in memory, a counter). On a cluster each TaskManager holds its own build
// of the job, so its tasks update that build's accumulators; their encodings are sent up and merged into
// the submitting process's copies. Merging must be a join (commutative, associative and idempotent), since
// values are re-sent, arrive in any order, and a restarted attempt's newer value meets its predecessor's.
// In the embedded mini-cluster the tasks update the accumulators of the Environment itself and nothing is
// merged.
type Accumulator interface {
	// EncodeAccumulator returns the value's encoding; it may be called while tasks update the value.
	EncodeAccumulator() ([]byte, error)
	// MergeAccumulator joins an encoding EncodeAccumulator returned (here or in another process) into the
	// value. Bad bytes are an error that leaves the value as it was.
	MergeAccumulator(data []byte) error
}

// MaxAccumulators bounds the accumulators of one job: every TaskManager sends each of them up while the
// job runs, so a job with thousands would spend its control plane on them. RegisterAccumulator past it
// records an error that Execute returns.
const MaxAccumulators = 256

// RegisterAccumulator makes a an accumulator of env's job under name. A mistake (an empty name, a nil
// accumulator, a name registered twice in the job, more than MaxAccumulators) is recorded like any other
// mistake in building the job: Execute (and Submit) return it, naming the accumulator.
func RegisterAccumulator(env *Environment, name string, a Accumulator) {
	switch {
	case name == "":
		env.addErr(errors.New("RegisterAccumulator: an accumulator needs a name"))
	case a == nil:
		env.addErr(fmt.Errorf("RegisterAccumulator(%q): the accumulator is nil", name))
	case env.accs[name] != nil:
		env.addErr(fmt.Errorf("RegisterAccumulator(%q): an accumulator of that name is already registered in this job; names must be unique in a job", name))
	case len(env.accs) >= MaxAccumulators:
		env.addErr(fmt.Errorf("RegisterAccumulator(%q): a job has at most %d accumulators (MaxAccumulators)", name, MaxAccumulators))
	default:
		if env.accs == nil {
			env.accs = map[string]Accumulator{}
		}
		env.accs[name] = a
	}
}

// accumulators returns the job's accumulators by name (a copy of the table; the values are the
// Environment's own).
func (e *Environment) accumulators() map[string]Accumulator { return maps.Clone(e.accs) }

// encodeAccumulators returns the encodings of e's accumulators by name; an error names the accumulator.
func (e *Environment) encodeAccumulators() (map[string][]byte, error) {
	out := make(map[string][]byte, len(e.accs))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(e.accs)) {
		b, err := e.accs[name].EncodeAccumulator()
		if err != nil {
			errs = append(errs, fmt.Errorf("accumulator %q: encoding: %w", name, err))
			continue
		}
		out[name] = b
	}
	return out, errors.Join(errs...)
}

// mergeAccumulators joins encodings another build of the job sent (by name) into e's accumulators. Every
// name must be one of e's: another one means the two builds differ. Each accumulator is merged or left as
// it was; the error names every one that was not.
func (e *Environment) mergeAccumulators(values map[string][]byte) error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(values)) {
		a := e.accs[name]
		if a == nil {
			errs = append(errs, fmt.Errorf("accumulator %q is not registered in this build of the job (registered: %v)", name, slices.Sorted(maps.Keys(e.accs))))
			continue
		}
		if err := a.MergeAccumulator(values[name]); err != nil {
			errs = append(errs, fmt.Errorf("accumulator %q: merging: %w", name, err))
		}
	}
	return errors.Join(errs...)
}
