package rpc

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/rpc/pb"
)

type (
	pbTo   = pb.ToTaskManager
	pbFrom = pb.FromTaskManager
)

// TestMain runs the child process of TestKilledPeer when asked to, and otherwise checks that no test
// leaves a goroutine behind: every session's reader and sender, and every gRPC server and connection,
// must be gone when the tests end.
func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		runChild(role) // TestKilledPeer's other process; never returns
	}
	goleak.VerifyTestMain(m)
}
