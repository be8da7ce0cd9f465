// Package barrier owns the checkpoint barrier aligner of a task: the state machine that decides, for a task
// with N input channels, when to take its checkpoint snapshot, which channels to stop reading meanwhile, and
// when to give a checkpoint up because its barrier will not come on some channel (Flink's
// SingleCheckpointBarrierHandler, written as a value in the style of etcd's raft library). It owns the
// checkpoint Mode too, since the mode is what the aligner does with barriers: the checkpoint coordinator,
// the job master and the checkpoint metadata use this type, and its String is the one spelling of the modes.
//
// # Driving the aligner
//
// The task's mailbox loop owns one Aligner and makes every call from that one goroutine: OnBarrier,
// OnCancelMarker and OnEndOfPartition for the in-band events it reads from input channel ch, OnAbort when
// the job master aborts a checkpoint, and, once before the first record, OnAbortUpTo with the highest
// checkpoint id triggered before the attempt was deployed. Each call returns an Action. Carry out its fields
// in this order, before reading the next buffer from any channel:
//
//  1. Aborts, oldest first: abandon the checkpoint and forward a cancel marker for it on every output;
//  2. Snapshot: snapshot the task's state, forward the barrier on every output, acknowledge (an unaligned
//     one: forward it ahead of the queued output and store the channels' data until Complete, then write);
//  3. UnblockAll: resume reading every channel that has not ended;
//  4. Block: stop reading these channels.
//
// Dropped marks an event that was ignored (stale, duplicate, or a barrier of an aborted checkpoint): do
// nothing for it and do not forward it.
//
// # Semantics
//
// Checkpoint ids are positive and increase per job; every channel delivers its events in order. The aligner
// follows one checkpoint at a time, the pending one.
//
//   - Exactly-once (aligned): the first barrier of a checkpoint starts its alignment; every channel that has
//     delivered the barrier is blocked until all channels that have not ended have delivered it; then the
//     action is Snapshot and UnblockAll. A task whose other channels all ended (or that has one channel)
//     snapshots at once and blocks nothing. No records are buffered here: a blocked channel backpressures
//     its producer through credit-based flow control.
//   - At-least-once: nothing is ever blocked; Snapshot comes when the last channel delivers the barrier.
//   - Unaligned (a barrier marked Checkpoint.Unaligned, in an exactly-once or unaligned aligner): the
//     first barrier is snapshotted at once and nothing is blocked; the task stores what the channels that
//     have not delivered it deliver, and the action is Complete when every channel delivered it or ended.
//     OnAlignmentTimeout switches a pending aligned checkpoint to unaligned: Snapshot and UnblockAll now,
//     Complete later. The rules for giving up below hold as for aligned checkpoints.
//   - A barrier or cancel marker of a checkpoint newer than the pending one abandons the pending one
//     (AbortSubsumed): a channel that has not delivered the pending barrier yet never will, since ids
//     increase along a channel. The newer barrier starts a new alignment.
//   - A cancel marker abandons its checkpoint (AbortCancelMarker), whether it is pending or not yet seen
//     here; an Abort for an unseen id lets the caller forward the marker so downstream stops waiting too.
//   - Everything with an id at or below the last completed or abandoned id ("done") is dropped, as is
//     everything older than the pending checkpoint. A cancel marker for id raises done to id, since the
//     channel that carried it will deliver no barrier at or below id.
//   - End of partition counts the channel as aligned for the pending and every later checkpoint; it may
//     complete the pending alignment.
//   - OnAbort of the pending checkpoint abandons it (AbortJobMaster). OnAbort of a newer id is remembered so
//     that its barriers are dropped when they arrive (a barrier of such an id on a channel that has not
//     delivered the pending barrier still abandons the pending checkpoint). At most MaxAbortedIDs such ids
//     are remembered; beyond that the oldest is forgotten, and its barriers would start an alignment that the
//     next checkpoint's barriers end.
//   - OnAbortUpTo(id) says every checkpoint up to id is completed or aborted: a restarted task calls it with
//     the highest id triggered before its deployment, since the barriers of those checkpoints were lost with
//     its previous attempt and will not come on every channel. A pending one among them is abandoned.
//   - OnChannelReset abandons the pending checkpoint (AbortChannelReset) and unblocks everything: the new
//     producer attempt will not send the pending barrier. A reset channel that had ended is live again, since
//     the new attempt sends records, barriers and its own end of partition. The task does not call it today:
//     every failover strategy restarts a restarted producer's consumers too (approximate recovery restarts
//     everything downstream of the failure), so a running consumer never sees its producer replaced.
//
// So alignment never waits on a barrier that will not come: every way a barrier can go missing (a cancel
// upstream, a newer checkpoint overtaking it, an abort by the job master, a restarted producer or consumer)
// ends it, at the latest when the next checkpoint's barrier arrives.
//
// At-least-once mode also follows one checkpoint at a time. With several concurrent checkpoints a fast
// channel could deliver the next barrier before a slow one delivered the current, which abandons the current
// one at this task. With one concurrent checkpoint (the default) that cannot happen: the next checkpoint is
// triggered only after the current one completed or was aborted everywhere. Flink's at-least-once tracker
// follows several checkpoints at once; Runnel may too, later.
//
// Invalid input: a channel index out of range is a bug of the caller and panics. Events on a channel after
// its end of partition, barriers and markers with ids below 1, and a second end of partition are dropped.
//
// # What this package must not touch
//
// It imports nothing from Runnel and only pure parts of the standard library; it starts no goroutine, reads
// no clock and does no I/O (TestPureCores, in the module root's layering_test.go, holds these rules). It
// does not read channels, buffer records, take snapshots or send anything: the task does, as the returned
// Actions say. It knows checkpoints only by id, timestamp and option flags, which it passes through
// untouched. An Aligner is not safe for concurrent use.
package barrier
