// Package checkpoint owns Runnel's checkpoint bookkeeping and checkpoint storage:
//
//   - the checkpoint coordinator (Coordinator), a pure state machine in the style of etcd's raft library. It
//     starts no goroutine, reads no clock and opens no socket: the job master feeds it events (Tick,
//     TriggerNow, Ack, Decline, TaskFailed, TasksRestarted, TaskFinished, Persisted, Stop), each stamped with
//     the caller's time in milliseconds, tells it which checkpoint the job was restored from (Restored), and
//     carries out the actions each call returns in a Ready (send triggers, persist a completed checkpoint,
//     notify tasks, discard aborted data, fail the job);
//   - the description of completed checkpoints (CompletedCheckpoint, StateHandle, BlobRef) and the check that
//     a checkpoint fits a job (Compatible);
//   - checkpoint storage (Storage) on gocloud.dev/blob: local files (file:// or a plain path) by default,
//     S3-compatible object stores (s3://bucket/prefix) as an option, and anything else behind the small
//     Bucket interface (memory for tests, an error-injecting wrapper in package errorbucket);
//   - savepoints: self-contained copies of a completed checkpoint in a directory of their own.
//
// # Driving the coordinator
//
// One goroutine of the job master owns the Coordinator and makes every call; each call returns a Ready
// whose fields say, in order, what to do (see Ready). A checkpoint goes: Tick triggers it at the running
// sources; tasks write their state with Storage.WriteBlob (or WriteState) and acknowledge with the returned
// BlobRefs; the last Ack hands the CompletedCheckpoint out in Ready.Persist; the caller commits it with
// Storage.CommitMetadata and reports back with Persisted, which completes it (Ready.Completed and
// NotifyComplete for the tasks). Task failures and restarts (TaskFailed, TasksRestarted) abort what they
// touch and move the fence to the new attempts; nothing from an older attempt is accepted afterwards.
//
// # Bounded inputs and the final checkpoint
//
// Checkpoints go on while some subtasks have finished (Flink's FLIP-147): a finished subtask is recorded
// as finished (no state; a restore does not run it again), and triggers go to the running subtasks whose
// upstream subtasks all finished, the new sources of what still runs. A subtask whose input ended reports
// it (TaskInputEnded) and keeps running until a checkpoint it took part in after that completed; once every
// subtask has ended its input or finished, the final checkpoint is triggered at once, so that what the last
// records did is covered by a checkpoint whose completion every task hears before the job is FINISHED.
//
// # Storage layout and formats
//
// Under a job's base location every checkpoint has a "directory" chk-<id>/ holding one object per state blob
// (named after the subtask attempt that wrote it) and a _metadata object, written last. A directory without
// _metadata is an incomplete checkpoint (in progress, aborted, or cut short by a crash) and is never used for
// a restore; Retain, RemovePartial and RemovePartialBetween delete such directories once nothing can write
// them any more (Discard deletes an aborted checkpoint's at once, but a late write may follow). A savepoint directory has the same layout without the chk-<id>/ level, so a retained
// checkpoint directory can also be restored from with ReadSavepoint.
//
// Incremental checkpoints put their state blobs in shared/ instead (WriteSharedBlob), where later
// checkpoints list them too (BlobRef.Shared; metadata that lists shared blobs is format version 3). Retain
// deletes a shared blob once no retained checkpoint lists it and it was written for a checkpoint no newer
// than the newest committed one. A savepoint copies the shared blobs it lists as its own; a retained
// chk-<id>/ opened with ReadSavepoint reads them from the shared/ beside it.
//
// Every object is framed by the same envelope: a 4-byte magic ("RNST" for state, "RNMD" for metadata), a
// little-endian uint16 format version, a uint16 of flags (zero), a uint64 payload length, the payload, and a
// CRC-32C (Castagnoli) of everything before it. Metadata payloads are JSON (format 1, see metadata.go); they
// list every state blob with its size and checksum. Readers check magic, version, length and checksum and
// report a corrupt object as a *CorruptError (errors.Is(err, ErrCorrupt)), a format written by a newer
// Runnel as ErrUnsupportedVersion, and an object that is cleanly absent as ErrNotFound; the three are
// different errors on purpose (pebble's "corruption is not EOF").
//
// # What this package must not touch
//
// It knows checkpoints only as ids, attempts and opaque state bytes. It must not import the task, network,
// jobmaster, scheduler, graph or cluster packages, nor the public runnel package; of Runnel's own packages it
// imports internal/ident only (a test in this package holds that rule).
package checkpoint
