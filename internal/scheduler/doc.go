// Package scheduler holds the job master's pure decisions about running a job: pipelined region computation
// over the execution graph, failover strategies (which subtasks restart when one fails), restart strategies
// (whether and after what delay to restart) and scheduling strategies (which regions to deploy when).
//
// Everything here is a deterministic function or a state machine driven by its caller, in the style of etcd's
// raft library: no goroutines, no clocks, no sockets, no I/O and no randomness of its own. Time is passed in
// as int64 milliseconds; jitter draws from a Random the caller injects. The goroutines, timers and RPCs that
// carry out these decisions live in internal/jobmaster and internal/cluster.
//
// The package owns:
//   - Topology: the pipelined regions of a job graph's subtasks (ComputeRegions) and lookups over them.
//   - FailoverStrategy: "full", "region" and "approximate" (ParseFailoverStrategy, NewFailoverStrategy).
//   - RestartStrategy: none, fixed-delay, exponential-delay and failure-rate (ParseRestartStrategy,
//     NewRestartStrategy).
//   - SchedulingStrategy: "eager" and "pipelined-region" (ParseSchedulingStrategy, NewSchedulingStrategy).
//
// It imports only internal/graph, internal/ident and the standard library. It must not import the network,
// task, state, checkpoint, jobmaster or cluster packages, nor the public runnel package, and it must not
// change the graph it is given.
//
// # Regions
//
// A pipelined region is a set of subtasks joined by PIPELINED_BOUNDED connections (the actual subtask-level
// connections of each edge, so a forward or rescale edge joins only the subtasks it connects). BLOCKING
// connections separate regions, and so do PIPELINED_APPROXIMATE ones: under approximate local recovery
// every subtask connected only by reconnectable edges is a region of its own. Regions are numbered from 0 in
// the order of their smallest member (by vertex ID, then subtask index), so the numbering depends on the job
// graph alone.
//
// # Scheduling unit
//
// The pipelined-region scheduling strategy deploys regions that are joined by PIPELINED_APPROXIMATE
// connections together, as if the edges were PIPELINED_BOUNDED: a reconnectable producer drops data while
// no consumer is attached, so its consumers must not be deployed later than it is. Regions whose blocking
// connections form a cycle (possible with subtask-level connections, for example a hash edge next to a forward
// one) are deployed together as well, since none of them could otherwise go first. A blocking result consumed
// inside such a group does not gate its deployment; its consumer reads it once the producer has finished.
// Without approximate edges and blocking cycles the unit is exactly the region.
package scheduler
