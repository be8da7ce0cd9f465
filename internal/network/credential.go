package network

// This file holds the partition-request credentials of the TCP data plane.
//
// Without them any process that reaches a data server could ask for any subpartition: partition ids are
// small integers, and a request that claims a newer consumer attempt replaces the view of a reconnectable
// subpartition, fencing the real consumer out for good. With them the server admits a request only if it
// carries the credential the job master computed for exactly that job, partition (which names the producer
// attempt), subpartition and consumer attempt, with a secret only the job's TaskManagers hold. A forged
// credential, or one lifted from another channel or another attempt, is refused before any view is touched.
//
// Threat model: this keeps out processes that are not part of the job. The job's TaskManagers hold the
// secret and run the job's code, so they are trusted. The credential travels in clear unless the data plane
// runs over TLS (ServerOptions.TLS): anyone who can read the traffic can replay it for that one channel.
//
// The credential is HMAC-SHA256, keyed with the job's secret, over this fixed layout (integers
// little-endian, 56 bytes):
//
//	offset  0  "RNPC"                                   magic: a partition credential, not any other MAC
//	offset  4  layout version u16 (1), two zero bytes
//	offset  8  job id                                   16 bytes
//	offset 24  result i32, producer vertex i32, producer index i32, producer attempt i32
//	offset 40  subpartition u32
//	offset 44  consumer vertex i32, consumer index i32, consumer attempt i32
//
// The layout is fixed width, so no two different requests encode to the same bytes.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"

	"github.com/runnel-dev/runnel/internal/ident"
)

const (
	// JobIDSize is the length of a job id on the wire.
	JobIDSize = 16
	// CredentialSize is the length of a partition credential.
	CredentialSize = sha256.Size
	// credentialLayoutVersion is the version of the layout the credential is computed over.
	credentialLayoutVersion = 1
	// credentialInputSize is the length of that layout.
	credentialInputSize = 56
)

// ErrBadCredential reports a partition request the server's Admit refused. Its text is exactly what the
// server answers, whatever the reason Admit gave (which goes to the server's log only), so that a prober
// learns nothing about which part of its request was wrong.
var ErrBadCredential = errors.New("partition request refused: bad credential")

// PartitionRequest is a consumer's request for one subpartition, as ServerOptions.Admit sees it.
type PartitionRequest struct {
	// Job is the id of the job the consumer belongs to (all zero from a client that sent none).
	Job [JobIDSize]byte
	// Partition names the partition, and with it the producer attempt.
	Partition ident.PartitionID
	// Subpartition is the requested subpartition's index (not yet checked against the partition).
	Subpartition int
	// Consumer is the attempt the consumer claims to be.
	Consumer ident.Attempt
	// Credential is what the consumer presents for this request.
	Credential [CredentialSize]byte
	// Remote is the address of the consumer's connection.
	Remote string
}

// PartitionCredential returns the credential that admits consumer attempt consumer to subpartition sub of
// partition p of job job, for a job whose secret is secret (see the layout at the top of this file).
func PartitionCredential(secret []byte, job [JobIDSize]byte, p ident.PartitionID, sub int, consumer ident.Attempt) [CredentialSize]byte {
	var out [CredentialSize]byte
	mac := hmac.New(sha256.New, secret)
	writeCredentialInput(mac, job, p, sub, consumer)
	mac.Sum(out[:0])
	return out
}

// writeCredentialInput writes the credential layout into the MAC.
func writeCredentialInput(mac hash.Hash, job [JobIDSize]byte, p ident.PartitionID, sub int, consumer ident.Attempt) {
	b := make([]byte, 0, credentialInputSize)
	b = append(b, 'R', 'N', 'P', 'C')
	b = binary.LittleEndian.AppendUint16(b, credentialLayoutVersion)
	b = append(b, 0, 0)
	b = append(b, job[:]...)
	for _, v := range [...]uint32{
		uint32(p.Result), uint32(p.Producer.Vertex), uint32(p.Producer.Index), uint32(p.Producer.Number),
		uint32(sub),
		uint32(consumer.Vertex), uint32(consumer.Index), uint32(consumer.Number),
	} {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	mac.Write(b)
}

// VerifyCredential checks the request's credential against the job's secret, in constant time. It returns
// nil if the credential is the one PartitionCredential gives for the request's job, partition, subpartition
// and consumer, and an error wrapping ErrBadCredential otherwise (always for an empty secret: a job without
// a secret admits no one).
func (r PartitionRequest) VerifyCredential(secret []byte) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret to check %s's request for partition %s subpartition %d against",
			ErrBadCredential, r.Consumer, r.Partition, r.Subpartition)
	}
	want := PartitionCredential(secret, r.Job, r.Partition, r.Subpartition, r.Consumer)
	if !hmac.Equal(want[:], r.Credential[:]) {
		return fmt.Errorf("%w: %s from %s presented a credential that does not match partition %s subpartition %d",
			ErrBadCredential, r.Consumer, r.Remote, r.Partition, r.Subpartition)
	}
	return nil
}
