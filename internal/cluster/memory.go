package cluster

import (
	"runtime/metrics"

	"github.com/runnel-dev/runnel/internal/protocol"
)

// memoryMetrics are the Go runtime's measures a heartbeat carries: the live heap, and all memory mapped
// by the runtime minus what it gave back to the operating system. Reading them stops nothing (unlike
// runtime.ReadMemStats).
var memoryMetrics = [...]string{"/memory/classes/heap/objects:bytes", "/memory/classes/total:bytes", "/memory/classes/heap/released:bytes"}

// heartbeat is a Heartbeat with this process's memory.
func heartbeat() protocol.Heartbeat {
	var s [len(memoryMetrics)]metrics.Sample
	for i, name := range memoryMetrics {
		s[i].Name = name
	}
	metrics.Read(s[:])
	value := func(i int) int64 {
		if s[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(s[i].Value.Uint64())
	}
	return protocol.Heartbeat{HeapBytes: value(0), MemoryBytes: value(1) - value(2)}
}
