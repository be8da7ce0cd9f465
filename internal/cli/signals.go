package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// signalStop cancels a job on the first SIGINT (Ctrl-C) or SIGTERM, so that both stop it the same way:
// the job is cancelled (with a savepoint first if one was asked for) and Execute removes its temporary
// checkpoint and spill directories before the command exits. A second signal is left to its default action
// and ends the process at once.
type signalStop struct {
	ch   chan os.Signal
	quit chan struct{}
	done chan struct{}
	sig  os.Signal // the signal that stopped the job; read after done is closed
	once sync.Once
}

func stopOnSignals(cancel context.CancelFunc, stderr io.Writer) *signalStop {
	s := &signalStop{ch: make(chan os.Signal, 1), quit: make(chan struct{}), done: make(chan struct{})}
	signal.Notify(s.ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		defer close(s.done)
		select {
		case sig := <-s.ch:
			signal.Stop(s.ch) // the next one takes the default action
			s.sig = sig
			fmt.Fprintf(stderr, "%s: %s: stopping the job (send it again to exit at once)\n", progName(), signalName(sig))
			cancel()
		case <-s.quit:
		}
	}()
	return s
}

// stop stops listening and returns the signal that stopped the job, or nil. It may be called more than once.
func (s *signalStop) stop() os.Signal {
	s.once.Do(func() {
		signal.Stop(s.ch)
		close(s.quit)
	})
	<-s.done
	return s.sig
}

// signalExitCode is the shell's code for a process ended by sig: 128 + its number (130 SIGINT, 143 SIGTERM).
func signalExitCode(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return ExitFailed
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
