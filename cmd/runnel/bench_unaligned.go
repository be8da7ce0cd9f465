package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel"
)

// unalignedFlags are --unaligned-checkpoints and --aligned-checkpoint-timeout of the bench commands
// that take checkpoints, as runnel.CheckpointConfig's Unaligned and AlignedCheckpointTimeout.
type unalignedFlags struct {
	unaligned bool
	timeout   time.Duration
}

// register adds the flags to fs; what says which of the command's runs take checkpoints.
func (u *unalignedFlags) register(fs *pflag.FlagSet, what string) {
	fs.BoolVar(&u.unaligned, "unaligned-checkpoints", false, what+": unaligned checkpoints (runnel.CheckpointConfig.Unaligned): barriers overtake the queued data, which is stored with the checkpoint")
	fs.DurationVar(&u.timeout, "aligned-checkpoint-timeout", 0, "with --unaligned-checkpoints: checkpoints start aligned and a subtask switches to unaligned once its alignment took this long (0: unaligned from the start)")
}

// validate refuses the flags where they do nothing: checkpointing says whether the command takes
// checkpoints, and if not, off names the flag that turns them on.
func (u unalignedFlags) validate(checkpointing bool, off string) error {
	var errs []error
	if u.timeout < 0 {
		errs = append(errs, fmt.Errorf("invalid --aligned-checkpoint-timeout %s: must not be negative", u.timeout))
	}
	if u.timeout > 0 && !u.unaligned {
		errs = append(errs, errors.New("--aligned-checkpoint-timeout switches aligned checkpoints to unaligned: set --unaligned-checkpoints too"))
	}
	if (u.unaligned || u.timeout > 0) && !checkpointing {
		errs = append(errs, fmt.Errorf("--unaligned-checkpoints and --aligned-checkpoint-timeout need checkpoints: set %s", off))
	}
	return errors.Join(errs...)
}

// apply sets the flags' fields of cc.
func (u unalignedFlags) apply(cc *runnel.CheckpointConfig) {
	cc.Unaligned, cc.AlignedCheckpointTimeout = u.unaligned, u.timeout
}

// args are the flags as command-line arguments of a job run by another process (none when unset).
func (u unalignedFlags) args() []string {
	var a []string
	if u.unaligned {
		a = append(a, "--unaligned-checkpoints")
	}
	if u.timeout != 0 {
		a = append(a, "--aligned-checkpoint-timeout="+u.timeout.String())
	}
	return a
}
