// Package watermark owns the decisions of event-time progress, as values: the watermark valve of a task's
// input gate (Flink's StatusWatermarkValve), its two-input form, the watermark generators of sources
// (bounded out-of-orderness, monotonous) and the idleness detector of a source.
//
// # Driving a valve
//
// The task's mailbox loop owns one Valve per input gate (a TwoInputValve for an operator with two inputs)
// and calls it from that one goroutine for the in-band events it reads from input channel ch: OnWatermark,
// OnIdle and OnActive (a producer's watermark status), OnFinished (its end of partition), and
// OnChannelReset when the channel is reconnected to a new attempt of its producer. Each call returns a
// Result; carry it out before the next event, in this order: an active status (if the valve became
// active), the watermark (if it advanced: to the operator's timers, then on every output), an idle status
// (if it became idle). Ignored names, for a log line, why an event changed nothing.
//
// # Rules of a valve
//
//   - A channel's watermark only moves forward: one at or below the channel's own is ignored (Behind,
//     Repeated). Why: a watermark is a promise about the channel's records, and a stale one promises less.
//   - The output is the minimum over the counted channels, those active and caught up, and it is monotone:
//     it is never emitted lower than before. Why: downstream timers and windows have fired on it.
//   - At the start every channel is active and caught up at MinWatermark: the output moves once every
//     channel delivered a watermark. Why: a channel that sent nothing yet may still send anything.
//   - An idle channel does not count, and going idle may advance the output to the minimum of the others.
//     A watermark on an idle channel is recorded but moves nothing until the channel is active again.
//     Why: idle means "do not wait for me"; the recorded watermark is still a valid promise.
//   - When no channel is active (all idle, or idle and finished), the valve is Idle; the task forwards an
//     idle status so that its consumers do not wait for it. When the last active channel goes idle and its
//     watermark is the output, the valve first flushes, as Flink's StatusWatermarkValve does: the output
//     moves to the highest watermark of the channels that did not finish (those recorded while idle
//     included), and the Result carries the advance before the idle status. Why: no channel will move the
//     minimum on any more, so without the flush the windows behind the highest watermark would wait until
//     some channel is active again, for ever when the subtask with data goes idle as the empty ones do.
//     Records behind the flushed output that come once a channel is active again are late, as in Flink.
//     A last channel that was catching up (below the output) does not flush, as in Flink; nor does a
//     channel's end that leaves only idle channels, since an end does not push the output past them.
//     While the valve is idle, its output does not advance.
//   - A channel that becomes active again counts at once if its watermark is at or above the output;
//     otherwise it is catching up, and counts from its first watermark at or above the output (Flink's
//     rule). Why: counting it at once would move the output back, or freeze it below what was emitted.
//   - A finished channel stops counting (it may advance the output); once every channel finished the output
//     is MaxWatermark. A finishing channel does not by itself push the output past idle or catching-up
//     channels: a producer that drains sends MaxWatermark before its end of partition, one that stops
//     without draining (a savepoint without drain) must not fire windows downstream.
//   - OnChannelReset (approximate recovery: a channel reconnected to a new producer attempt, which starts
//     from MinWatermark) makes the channel active with no watermark and catching up, like a re-activated
//     idle channel: it counts from its first watermark at or above the output. Why: it must neither move
//     the output back nor hold it back until the new attempt's event time reaches it. While the valve has
//     not emitted anything (output MinWatermark) it counts at once, as at the start. A finished channel is
//     live again; a valve that had finished stays at MaxWatermark, so the new attempt's records are late.
//
// A reset channel that held the output back stops doing so: the reset may advance the output to the
// minimum of the other channels, and records of the new attempt below it are late.
//
// A TwoInputValve applies the same rules between its two inputs, each a Valve of its own, with the input's
// output and status standing for a channel's, except the flush: each input's valve flushes its own
// channels, but once neither input is active the operator's watermark stays where it is, as Flink's
// combined watermark of an operator's inputs does (the minimum over the active inputs, no change once all
// are idle). An input whose last channel finished counts as finished, not as having sent MaxWatermark, as
// a single channel does. An input with an active but catching-up channel is
// active and holds the operator at the input's output until that channel catches up, where one valve over
// the channels of both inputs would not count the channel at all: the two differ only then.
//
// OnWatermark costs O(1) while another counted channel still holds the output, and a scan of the N
// channels when the last one holding it moves on (once a round when channels advance in turn; every time
// at worst). Every other event scans the N channels. None allocates.
//
// # Sources
//
// A source with a WatermarkStrategy keeps a Generator per split: OnEvent with every record's timestamp,
// OnPeriodic every watermark interval, emitting only when it advanced. An IdleDetector beside it, told of
// records by OnEvent and of the processing time by Tick (on the same interval), says when to forward an
// idle status and when an active one.
//
// # What this package must not touch
//
// It imports nothing from Runnel and only pure parts of the standard library; it starts no goroutine, uses
// no channel, reads no clock and does no I/O (TestPureCores, in the module root's layering_test.go, holds
// these rules): time comes in as milliseconds from the caller. It knows no task, record, buffer, network
// or timer service; it does not forward anything itself. Every table here has a fixed size: a Valve holds
// exactly its N channels, a TwoInputValve three valves, a Generator and an IdleDetector a few words.
// Invalid input (a channel or input index out of range, a negative bound) is a bug of the caller and
// panics.
package watermark
