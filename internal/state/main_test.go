package state

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: a closed pebble backend must have stopped all of
// pebble's, and a snapshot write must not outlive its backend.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
