// Package jobcore holds the job master's decisions as pure values: what a failover lost (the loss ledger and
// the bounded failover history), the terminal status and the snapshot of a job, which state a restarted
// subtask restores, and Core, the job master's state machine, fed events with the time they happened and
// returning, in Ready, what its driver must carry out (storage ops, deployments, cancellations, partition
// releases, checkpoint triggers and notifications, loss samples, log lines). Core drives the checkpoint
// coordinator (checkpoint.Coordinator) and turns what it asks for into storage ops and messages; every
// storage op is answered by a StorageDone event, and nothing that depends on an op's result is asked for
// before that event (see Ready).
//
// It starts no goroutine, uses no channel or lock, reads no clock and does no I/O: time is a time.Duration
// since the job started, passed in with every event, so every behaviour is decided by the events alone and
// replays from a script (testdata/). It must not import the public runnel package, the network, the
// TaskManagers or the cluster wiring; the driver in internal/jobmaster owns goroutines, sockets, timers and
// storage, and talks to the TaskManagers on the core's behalf.
package jobcore
