package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

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
	v := new(byteSize)
	fs.Var(v, heapBudgetFlag, fmt.Sprintf("heap the garbage collector lets the process grow to before it collects, however little of it is live: bytes, or\n"+
		"with a unit, 512MiB, 2GiB (k, m, g alike) (0: %d MiB; -1: none, Go's own pacing by GOGC alone). Never more collections than\n"+
		"GOGC alone; fewer while the live heap is small", heapbudget.Default>>20))
	return func() (*heapbudget.Pacer, error) {
		budget, err := heapBudget(int64(*v))
		if err != nil {
			return nil, err
		}
		return heapbudget.Start(budget), nil
	}
}

// byteSize is a flag's number of bytes, written plain or with a binary unit: 268435456, 256MiB, 256m.
type byteSize int64

// byteUnits are the units a byteSize takes, each a power of 1024 (as the JVM's -Xmx takes k, m, g).
var byteUnits = map[string]int64{"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40}

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Type() string { return "size" }

func (b *byteSize) Set(s string) error {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	n, err := strconv.ParseInt(t[:i], 10, 64)
	if err != nil {
		return errors.New("want a whole number of bytes, optionally with a unit (KiB, MiB, GiB, TiB or k, m, g, t)")
	}
	name := strings.TrimSpace(t[i:])
	unit, ok := byteUnits[strings.ToLower(name)]
	if !ok {
		return fmt.Errorf("unknown unit %q: use KiB, MiB, GiB, TiB (or k, m, g, t), powers of 1024", name)
	}
	if n > 0 && n > (1<<63-1)/unit || n < 0 && unit != 1 {
		return errors.New("out of range")
	}
	*b = byteSize(n * unit)
	return nil
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
