package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/heapbudget"
)

// heapBudgetFlag is the name of the flag of the processes that run tasks (run, taskmanager, bench) that
// sets their heap budget (internal/heapbudget).
const heapBudgetFlag = "heap-budget"

// noHeapBudget is --heap-budget's value for Go's own pacing (GOGC alone).
const noHeapBudget = -1

// AddHeapBudgetFlag adds --heap-budget to fs; the function it returns starts the pacer once fs is parsed
// (stop it when the process's work is done), or returns the mistake.
func AddHeapBudgetFlag(fs *pflag.FlagSet) func() (*heapbudget.Pacer, error) {
	v := fs.Int64(heapBudgetFlag, 0, fmt.Sprintf("bytes of heap the garbage collector lets the process grow to before it collects, however little of it is live\n"+
		"(0: %d MiB; -1: none, Go's own pacing by GOGC alone). Never more collections than GOGC alone; fewer while the live heap is small", heapbudget.Default>>20))
	return func() (*heapbudget.Pacer, error) {
		budget, err := heapBudget(*v)
		if err != nil {
			return nil, err
		}
		return heapbudget.Start(budget), nil
	}
}

// heapBudget returns the budget of a --heap-budget value, or the mistake.
func heapBudget(v int64) (uint64, error) {
	switch {
	case v == 0:
		return heapbudget.Default, nil
	case v == noHeapBudget:
		return 0, nil
	case v < 1<<20:
		return 0, fmt.Errorf("invalid --%s %d: at least 1 MiB (1048576), 0 for the default or -1 for none", heapBudgetFlag, v)
	}
	return uint64(v), nil
}
