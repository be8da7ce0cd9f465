// Package rpc owns the wire of the plain-data contract between a JobManager and its TaskManagers: the
// protobuf encoding of every protocol.Envelope body (runnel.proto, convert.go), the transports that carry
// a protocol.Session (Pipe, in memory but marshalled like the real thing; DialGateway and
// NewGatewayServer over gRPC), and the client service of `runnel submit` (JobService, JobClient).
//
// It must not decide anything about jobs or sessions: it does not interpret a message, retry, time out a
// silent peer (heartbeats are the dispatcher's) or pick a status. What it guarantees is transport:
// messages arrive in the order sent or the session ends; Send never blocks and never drops silently (a
// full queue or a message that cannot be encoded ends the session with an error saying so); a session
// that ends says why.
package rpc
