package network

// This file defines the wire protocol of the TCP data plane and its incremental frame decoder.
//
// One TCP connection carries one subpartition to one consumer attempt (a RemoteInputChannel reading from a
// Server). The conversation is:
//
//	client → server  preamble: "RNDP", protocol version (uint16 LE), two zero bytes       (8 bytes)
//	client → server  PartitionRequest
//	server → client  RequestOK, or Error and the server closes
//	server → client  Buffer frames, each sent against one credit; the last is end-of-partition
//	client → server  AddCredit frames, as the consumer recycles buffers
//	either side      Close: the sender is going away (client: channel released; server: shutting down)
//
// Every frame after the preamble is
//
//	offset 0  type    uint8
//	offset 1  length  uint32 LE, bytes of payload that follow
//	offset 5  payload
//
// Payloads (integers little-endian):
//
//	PartitionRequest  result i32, producer vertex i32, producer index i32, producer attempt i32,
//	                  subpartition u32, consumer vertex i32, consumer index i32, consumer attempt i32,
//	                  initial credit u32, consumer buffer size u32,
//	                  job id (16 bytes), credential (32 bytes, see credential.go),
//	                  replay from checkpoint i64 (in-flight logs; 0: from the start)          (96 bytes)
//	RequestOK         producer buffer size u32: the largest Buffer frame the server will send   (4 bytes)
//	Error             code u8, then a UTF-8 message of at most maxErrorMessageBytes              (1..513 bytes)
//	Buffer            one network buffer exactly as in memory, header and payload (Buffer.Bytes) (20..buffer size)
//	AddCredit         credits u32: the consumer can take that many more buffers                  (4 bytes)
//	Close             empty                                                                      (0 bytes)
//
// Versions. Version 2 added the job id and the credential to the PartitionRequest (version 1 had the 40
// bytes before them); version 3 added the checkpoint to replay an in-flight log from; nothing else changed. A server answers a preamble of any other version with an Error
// frame naming both versions, whose layout every version shares, and closes.
//
// The length of a frame is checked against the maximum for its type before anything is allocated or copied:
// control frames have fixed or small sizes, Buffer frames at most the buffer size negotiated by the request
// (the producer's buffer size, which must not exceed the consumer's). Each side accepts only the frame types
// its peer may send at that point. A violation closes the connection with ErrProtocol and an error message
// that quotes a bounded snippet of the offending bytes.
//
// The decoder is a state machine fed with whatever pieces the socket returns. It collects the preamble and
// frame headers byte by byte, copies payloads in bulk, and keeps no more scratch space than one control frame
// plus (only when no destination is supplied for Buffer frames) one buffer.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/runnel-dev/runnel/internal/ident"
)

var (
	// ErrProtocol reports bytes on a data-plane connection that violate the wire protocol: a bad preamble,
	// an unknown or unexpected frame type, a frame longer than allowed, a buffer sent without credit.
	ErrProtocol = errors.New("network: protocol violation")
	// ErrConnectionClosed reports a data-plane connection that ended before the end of its partition.
	ErrConnectionClosed = errors.New("network: connection closed before end of partition")
	// ErrInvalidRequest reports a partition request the server cannot serve as asked: a subpartition index
	// out of range or a consumer buffer size smaller than the producer's.
	ErrInvalidRequest = errors.New("network: invalid partition request")
)

// protocolVersion is the version of the wire format spoken by this package (see Versions above).
const protocolVersion = 3

// preambleSize is the length of the fixed bytes a client sends right after connecting.
const preambleSize = 8

// preambleMagic opens the preamble.
const preambleMagic = "RNDP"

// wirePreamble is the preamble of this protocol version.
var wirePreamble = [preambleSize]byte{'R', 'N', 'D', 'P', protocolVersion, 0, 0, 0}

// frameHeaderSize is the size of a frame's type and length.
const frameHeaderSize = 5

// frameType is the first byte of every frame.
type frameType uint8

const (
	framePartitionRequest frameType = 1
	frameRequestOK        frameType = 2
	frameError            frameType = 3
	frameBuffer           frameType = 4
	frameAddCredit        frameType = 5
	frameClose            frameType = 6
	frameTypeMax                    = frameClose
)

func (t frameType) String() string {
	switch t {
	case framePartitionRequest:
		return "PartitionRequest"
	case frameRequestOK:
		return "RequestOK"
	case frameError:
		return "Error"
	case frameBuffer:
		return "Buffer"
	case frameAddCredit:
		return "AddCredit"
	case frameClose:
		return "Close"
	}
	return fmt.Sprintf("frame(%d)", uint8(t))
}

// frameSet is a set of frame types, as a bit mask.
type frameSet uint8

func frameSetOf(ts ...frameType) frameSet {
	var s frameSet
	for _, t := range ts {
		s |= 1 << t
	}
	return s
}

func (s frameSet) has(t frameType) bool { return t <= frameTypeMax && s&(1<<t) != 0 }

// Frame sets accepted by each side at each stage.
var (
	serverHandshakeFrames = frameSetOf(framePartitionRequest)
	serverStreamFrames    = frameSetOf(frameAddCredit, frameClose)
	clientHandshakeFrames = frameSetOf(frameRequestOK, frameError)
	clientStreamFrames    = frameSetOf(frameBuffer, frameError, frameClose)
)

// Payload sizes of the control frames.
const (
	partitionRequestSize = 96
	// requestIntsSize is the part of a PartitionRequest before the job id: ten 32-bit integers.
	requestIntsSize = 40
	requestOKSize   = 4
	addCreditSize   = 4
	// maxErrorMessageBytes bounds the message of an Error frame; longer messages are cut.
	maxErrorMessageBytes = 512
	// maxControlPayload is the largest payload of any frame other than Buffer.
	maxControlPayload = 1 + maxErrorMessageBytes
	// maxWireBufferSize bounds the buffer size a request may declare (a sanity limit, far above any
	// configured buffer size).
	maxWireBufferSize = 64 << 20
	// snippetBytes bounds the bytes an error message quotes.
	snippetBytes = 32
)

// errorCode says which error an Error frame reports, so the client can wrap the matching sentinel.
type errorCode uint8

const (
	codeInternal          errorCode = 1
	codePartitionNotFound errorCode = 2
	codePartitionReleased errorCode = 3
	codeStaleAttempt      errorCode = 4
	codeAlreadyConsumed   errorCode = 5
	codeViewReleased      errorCode = 6
	codeInvalidRequest    errorCode = 7
	codeProtocol          errorCode = 8
	codeCorrupt           errorCode = 9
	codePartitionNotReady errorCode = 10
	codeBadCredential     errorCode = 11
	codeLogIncomplete     errorCode = 12
)

// codeSentinels maps error codes to the sentinel errors they stand for, in the order codeOf tries them.
var codeSentinels = []struct {
	code errorCode
	err  error
}{
	{codePartitionNotReady, ErrPartitionNotReady}, // before NotFound, which it wraps
	{codePartitionNotFound, ErrPartitionNotFound},
	{codePartitionReleased, ErrPartitionReleased},
	{codeStaleAttempt, ErrStaleAttempt},
	{codeAlreadyConsumed, ErrAlreadyConsumed},
	{codeViewReleased, ErrViewReleased},
	{codeInvalidRequest, ErrInvalidRequest},
	{codeProtocol, ErrProtocol},
	{codeCorrupt, ErrCorrupt},
	{codeBadCredential, ErrBadCredential},
	{codeLogIncomplete, ErrLogIncomplete},
}

// codeOf classifies err for an Error frame.
func codeOf(err error) errorCode {
	for _, cs := range codeSentinels {
		if errors.Is(err, cs.err) {
			return cs.code
		}
	}
	return codeInternal
}

// remoteError is an error the server reported in an Error frame. It unwraps to the sentinel of its code, so
// errors.Is(err, ErrStaleAttempt) works on the client as it does on the server.
type remoteError struct {
	code    errorCode
	message string
}

func (e *remoteError) Error() string { return "server replied: " + e.message }

func (e *remoteError) Unwrap() error {
	for _, cs := range codeSentinels {
		if cs.code == e.code {
			return cs.err
		}
	}
	return nil
}

// partitionRequest is the payload of a PartitionRequest frame.
type partitionRequest struct {
	partition    ident.PartitionID
	subpartition int
	consumer     ident.Attempt
	credit       int
	bufferSize   int
	job          [JobIDSize]byte
	credential   [CredentialSize]byte
	replayFrom   int64
}

// appendFrameHeader appends the type and length of a frame.
func appendFrameHeader(dst []byte, t frameType, n int) []byte {
	dst = append(dst, byte(t))
	return binary.LittleEndian.AppendUint32(dst, uint32(n))
}

// appendPartitionRequest appends a whole PartitionRequest frame.
func appendPartitionRequest(dst []byte, r partitionRequest) []byte {
	dst = appendFrameHeader(dst, framePartitionRequest, partitionRequestSize)
	for _, v := range [...]uint32{
		uint32(r.partition.Result),
		uint32(r.partition.Producer.Vertex), uint32(r.partition.Producer.Index), uint32(r.partition.Producer.Number),
		uint32(r.subpartition),
		uint32(r.consumer.Vertex), uint32(r.consumer.Index), uint32(r.consumer.Number),
		uint32(r.credit), uint32(r.bufferSize),
	} {
		dst = binary.LittleEndian.AppendUint32(dst, v)
	}
	dst = append(dst, r.job[:]...)
	dst = append(dst, r.credential[:]...)
	return binary.LittleEndian.AppendUint64(dst, uint64(r.replayFrom))
}

// parsePartitionRequest decodes the payload of a PartitionRequest frame (its length was checked).
func parsePartitionRequest(p []byte) partitionRequest {
	u := func(i int) uint32 { return binary.LittleEndian.Uint32(p[4*i:]) }
	r := partitionRequest{
		partition: ident.PartitionID{
			Result: ident.ResultID(int32(u(0))),
			Producer: ident.Attempt{
				Subtask: ident.Subtask{Vertex: ident.VertexID(int32(u(1))), Index: int32(u(2))},
				Number:  int32(u(3)),
			},
		},
		subpartition: int(u(4)),
		consumer: ident.Attempt{
			Subtask: ident.Subtask{Vertex: ident.VertexID(int32(u(5))), Index: int32(u(6))},
			Number:  int32(u(7)),
		},
		credit:     int(u(8)),
		bufferSize: int(u(9)),
	}
	copy(r.job[:], p[requestIntsSize:])
	copy(r.credential[:], p[requestIntsSize+JobIDSize:])
	r.replayFrom = int64(binary.LittleEndian.Uint64(p[requestIntsSize+JobIDSize+CredentialSize:]))
	return r
}

// appendRequestOK appends a RequestOK frame announcing the largest Buffer frame the server will send.
func appendRequestOK(dst []byte, bufferSize int) []byte {
	dst = appendFrameHeader(dst, frameRequestOK, requestOKSize)
	return binary.LittleEndian.AppendUint32(dst, uint32(bufferSize))
}

// appendErrorFrame appends an Error frame; the message is cut to maxErrorMessageBytes.
func appendErrorFrame(dst []byte, code errorCode, msg string) []byte {
	if len(msg) > maxErrorMessageBytes {
		msg = strings.ToValidUTF8(msg[:maxErrorMessageBytes], "")
	}
	dst = appendFrameHeader(dst, frameError, 1+len(msg))
	dst = append(dst, byte(code))
	return append(dst, msg...)
}

// parseErrorFrame decodes the payload of an Error frame (at least one byte, checked by the decoder).
func parseErrorFrame(p []byte) *remoteError {
	return &remoteError{code: errorCode(p[0]), message: string(p[1:])}
}

// appendAddCredit appends an AddCredit frame.
func appendAddCredit(dst []byte, n uint32) []byte {
	dst = appendFrameHeader(dst, frameAddCredit, addCreditSize)
	return binary.LittleEndian.AppendUint32(dst, n)
}

// closeFrame is the whole, constant Close frame.
var closeFrame = appendFrameHeader(nil, frameClose, 0)

// frame is one decoded frame. Its payload is valid until the next call to decode.
type frame struct {
	typ     frameType
	payload []byte
}

// decoderState says what the frame decoder expects next.
type decoderState uint8

const (
	statePreamble decoderState = iota
	stateHeader
	statePayload
	stateFailed
)

// frameDecoder cuts frames out of a byte stream that arrives in arbitrary pieces.
type frameDecoder struct {
	// allowed lists the frame types accepted now; the owner changes it between stages.
	allowed frameSet
	// maxBuffer is the largest Buffer frame accepted.
	maxBuffer int
	// bufferDst, if set, supplies the destination of a Buffer frame's payload of n bytes (n already
	// checked against maxBuffer); otherwise payloads are assembled in scratch.
	bufferDst func(n int) ([]byte, error)

	state   decoderState
	pre     [preambleSize]byte
	hdr     [frameHeaderSize]byte
	have    int // bytes of the preamble, header or payload collected so far
	typ     frameType
	length  int
	dst     []byte
	ctrl    [maxControlPayload]byte
	scratch []byte
	offset  int64 // stream offset of the next byte, for error messages
	err     error
}

// newFrameDecoder makes a decoder that expects the preamble first if preamble is set, then frames of the
// allowed types.
func newFrameDecoder(preamble bool, allowed frameSet, maxBuffer int) *frameDecoder {
	d := &frameDecoder{allowed: allowed, maxBuffer: maxBuffer, state: stateHeader}
	if preamble {
		d.state = statePreamble
	}
	return d
}

// frameLimits returns the smallest and largest payload of a frame of type t.
func (d *frameDecoder) frameLimits(t frameType) (minLen, maxLen int) {
	switch t {
	case framePartitionRequest:
		return partitionRequestSize, partitionRequestSize
	case frameRequestOK:
		return requestOKSize, requestOKSize
	case frameError:
		return 1, maxControlPayload
	case frameBuffer:
		return HeaderSize, d.maxBuffer
	case frameAddCredit:
		return addCreditSize, addCreditSize
	}
	return 0, 0 // Close
}

// decode consumes bytes of p until one frame is complete or p is exhausted. It returns the number of bytes
// consumed and, when ok, the frame. After an error the decoder is dead and returns the same error.
func (d *frameDecoder) decode(p []byte) (n int, f frame, ok bool, err error) {
	for n < len(p) {
		switch d.state {
		case stateFailed:
			return n, frame{}, false, d.err
		case statePreamble:
			c := p[n]
			if d.have < len(preambleMagic) && c != preambleMagic[d.have] {
				return n, frame{}, false, d.fail(p[n:], "bad preamble %q, want %q: not a Runnel data-plane client",
					snippet(d.pre[:d.have], p[n:]), preambleMagic)
			}
			d.pre[d.have] = c
			d.have++
			n++
			if d.have == preambleSize {
				if d.pre != wirePreamble {
					// Named both ways, so that whoever reads it on either side knows which build is behind.
					return n, frame{}, false, d.fail(nil, "unsupported protocol version %d (reserved % x), this server speaks version %d: the client runs another Runnel version",
						binary.LittleEndian.Uint16(d.pre[4:]), d.pre[6:], protocolVersion)
				}
				d.offset += preambleSize
				d.state, d.have = stateHeader, 0
			}
		case stateHeader:
			d.hdr[d.have] = p[n]
			d.have++
			n++
			if d.have == 1 && !d.allowed.has(frameType(d.hdr[0])) {
				return n, frame{}, false, d.fail(p[n:], "unexpected frame type %s", frameType(d.hdr[0]))
			}
			if d.have < frameHeaderSize {
				continue
			}
			if f, ok, err := d.beginPayload(p[n:]); ok || err != nil {
				return n, f, ok, err
			}
		case statePayload:
			k := copy(d.dst[d.have:], p[n:])
			d.have += k
			n += k
			if d.have == d.length {
				return n, d.complete(), true, nil
			}
		}
	}
	if d.state == stateFailed {
		return n, frame{}, false, d.err
	}
	return n, frame{}, false, nil
}

// beginPayload checks the length of a frame whose header is complete and sets up its destination. A frame
// with an empty payload completes at once.
func (d *frameDecoder) beginPayload(rest []byte) (frame, bool, error) {
	t := frameType(d.hdr[0])
	length := int64(binary.LittleEndian.Uint32(d.hdr[1:]))
	minLen, maxLen := d.frameLimits(t)
	if length < int64(minLen) || length > int64(maxLen) {
		if minLen == maxLen {
			return frame{}, false, d.fail(rest, "%s frame of %d bytes, want %d", t, length, minLen)
		}
		return frame{}, false, d.fail(rest, "%s frame of %d bytes, want %d to %d", t, length, minLen, maxLen)
	}
	d.typ, d.length, d.have = t, int(length), 0
	d.state = statePayload
	switch {
	case t != frameBuffer:
		d.dst = d.ctrl[:d.length]
	case d.bufferDst != nil:
		dst, err := d.bufferDst(d.length)
		if err != nil {
			d.state, d.err = stateFailed, err
			return frame{}, false, err
		}
		d.dst = dst[:d.length]
	default:
		if cap(d.scratch) < d.length {
			d.scratch = make([]byte, d.maxBuffer)
		}
		d.dst = d.scratch[:d.length]
	}
	if d.length == 0 {
		return d.complete(), true, nil
	}
	return frame{}, false, nil
}

// complete finishes the current frame and readies the decoder for the next header.
func (d *frameDecoder) complete() frame {
	f := frame{typ: d.typ, payload: d.dst}
	d.offset += int64(frameHeaderSize + d.length)
	d.state, d.have, d.dst = stateHeader, 0, nil
	return f
}

// fail kills the decoder with an ErrProtocol that quotes the collected header bytes and the start of rest.
func (d *frameDecoder) fail(rest []byte, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if d.state == stateHeader {
		msg = fmt.Sprintf("%s at stream offset %d (bytes % x)", msg, d.offset, snippet(d.hdr[:d.have], rest))
	}
	d.state = stateFailed
	d.err = fmt.Errorf("%w: %s", ErrProtocol, msg)
	return d.err
}

// snippet returns at most snippetBytes bytes: head followed by the start of rest.
func snippet(head, rest []byte) []byte {
	out := make([]byte, 0, snippetBytes)
	out = append(out, head[:min(len(head), snippetBytes)]...)
	return append(out, rest[:min(len(rest), snippetBytes-len(out))]...)
}
