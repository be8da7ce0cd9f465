// Package network is Runnel's data plane: fixed-size pooled buffers with self-describing framing, result
// partitions split into subpartitions (one per consumer subtask), subpartition views with credit-based flow
// control, input gates and channels on the consumer side, and the record (de)serialization into buffers.
//
// One data path: a local channel and a TCP channel both sit behind InputChannel, and both are gated by the
// same credit held in the producer's View, so backpressure, events, end-of-partition and reconnection behave
// the same on both.
//
// Framing. Every buffer starts with a Header that says how many leading payload bytes continue a record begun
// in an earlier buffer (Continuation), how many records start in it (Starts), and the channel sequence number
// of the first record that starts in it (FirstSeq). Records are written as a 4-byte little-endian length
// followed by the encoded bytes, and may span any number of buffers. A reader that joins mid-stream skips the
// continuation bytes and begins at a whole record; the number of records lost on a channel is a subtraction
// of sequence numbers. Events (end of partition, checkpoint barriers, watermarks and watermark statuses,
// ...) travel in-band as event buffers: one fixed 21-byte Event per buffer, sent after the partly filled
// data buffer before it is flushed, so every event keeps its place among the records on both transports.
//
// A subpartition outlives its reader: releasing a View (the consumer went away) is distinct from releasing
// the partition (producer finished or failed, or the job ended). For reconnectable (approximate) partitions a
// newer consumer attempt may attach a new view later, the older one is released first, and while no view is
// attached whole buffers are dropped and counted instead of blocking the producer. Such a subpartition
// remembers the last watermark and watermark status it was given and hands copies of them to each newer
// reader before anything else, so that a restarted consumer does not wait for a watermark that was sent
// (or dropped) before it came. A reader that is gone
// without releasing its view (its TCP connection stopped taking data: the server's write timed out) is
// failed instead (View.Fail): a reconnectable subpartition drops as above, a pipelined one fails its
// partition with a *ConsumerGoneError that names the consumer, so that the producer fails over rather
// than wait for it forever.
//
// The TCP data server bounds its connections (ServerOptions.MaxConnections, MaxConnectionsPerHost) and
// the time a new connection may take to send its request (HandshakeTimeout); see tcp_server.go and the
// admission decisions in admission.go. It admits a partition request only if ServerOptions.Admit does
// (credentials: an HMAC of the request under the job's secret, credential.go), asked before any view is
// touched, and may run every connection over mutual TLS 1.3 (ServerOptions.TLS, DialOptions.TLS).
//
// Blocking (BLOCKING, batch) partitions write their buffers to one spill file per subpartition instead of
// queueing them, so their producer never waits for a consumer. They are consumable once the producer has
// finished (before that CreateView fails with ErrPartitionNotReady, which wraps ErrPartitionNotFound so that
// consumers wait as for a producer not yet deployed), and every newer consumer attempt re-reads a
// subpartition from the start: that is what lets region failover restart a consumer region without its
// producers. They are released (and their files deleted) only by their owner. See blocking.go.
//
// The package owns bytes, buffers and channels. It knows nothing of record types, operators, tasks or the
// job graph; it must not import runnel, internal/task, internal/graph or internal/jobmaster.
package network
