package network

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"github.com/runnel-dev/runnel/internal/ident"
)

// allFrames accepts every frame type, so one decoder can read a stream mixing both directions.
var allFrames = frameSetOf(framePartitionRequest, frameRequestOK, frameError, frameBuffer, frameAddCredit, frameClose)

const wireTestMaxBuffer = 256

// sealedBuffer makes a buffer with a valid header and payload bytes, as a producer would send it.
func sealedBuffer(kind Kind, payload []byte, firstSeq uint64, starts uint32) []byte {
	b := &Buffer{data: make([]byte, HeaderSize, HeaderSize+len(payload))}
	b.Header = Header{Kind: kind, FirstSeq: firstSeq, Starts: starts}
	b.data = append(b.data, payload...)
	b.Seal()
	return b.Bytes()
}

// validStream returns a stream with one frame of every type, as [preamble, frames...].
func validStream() (stream []byte, frames []frame) {
	stream = append(stream, wirePreamble[:]...)
	add := func(before int, typ frameType) {
		frames = append(frames, frame{typ: typ, payload: bytes.Clone(stream[before+frameHeaderSize:])})
	}
	req := partitionRequest{
		partition:    ident.PartitionID{Result: 7, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 3, Index: 2}, Number: 1}},
		subpartition: 5,
		consumer:     ident.Attempt{Subtask: ident.Subtask{Vertex: 4, Index: 5}, Number: 9},
		credit:       2,
		bufferSize:   wireTestMaxBuffer,
		job:          [JobIDSize]byte{1, 2, 3},
		credential:   [CredentialSize]byte{0: 0xc1, 31: 0xc2},
	}
	n := len(stream)
	stream = appendPartitionRequest(stream, req)
	add(n, framePartitionRequest)
	n = len(stream)
	stream = appendRequestOK(stream, wireTestMaxBuffer)
	add(n, frameRequestOK)
	for _, payload := range [][]byte{
		nil,
		{1, 2, 3, 4},
		bytes.Repeat([]byte{0xab}, wireTestMaxBuffer-HeaderSize),
	} {
		buf := sealedBuffer(KindData, payload, 3, 0)
		n = len(stream)
		stream = appendFrameHeader(stream, frameBuffer, len(buf))
		stream = append(stream, buf...)
		add(n, frameBuffer)
	}
	// Event buffers: a barrier, and the watermark events, so that the fuzz corpus holds each.
	for _, e := range []Event{
		{Type: EventBarrier, CheckpointID: 4, TimestampMillis: 99},
		WatermarkEvent(-5),
		WatermarkStatusEvent(true),
	} {
		buf := sealedBuffer(KindEvent, e.append(nil), 3, 0)
		n = len(stream)
		stream = appendFrameHeader(stream, frameBuffer, len(buf))
		stream = append(stream, buf...)
		add(n, frameBuffer)
	}
	n = len(stream)
	stream = appendAddCredit(stream, 3)
	add(n, frameAddCredit)
	n = len(stream)
	stream = appendErrorFrame(stream, codeStaleAttempt, "attempt v4[5]#9 is stale")
	add(n, frameError)
	n = len(stream)
	stream = append(stream, closeFrame...)
	add(n, frameClose)
	return stream, frames
}

// decodeChunks feeds chunks to a fresh decoder and returns copies of the frames decoded until the first
// error.
func decodeChunks(preamble bool, chunks ...[]byte) ([]frame, error) {
	d := newFrameDecoder(preamble, allFrames, wireTestMaxBuffer)
	var out []frame
	for _, p := range chunks {
		for len(p) > 0 {
			n, f, ok, err := d.decode(p)
			if n < 0 || n > len(p) {
				panic(fmt.Sprintf("decode consumed %d of %d bytes", n, len(p)))
			}
			p = p[n:]
			if err != nil {
				return out, err
			}
			if ok {
				out = append(out, frame{typ: f.typ, payload: bytes.Clone(f.payload)})
			} else if len(p) > 0 {
				panic("decode returned without a frame, an error or consuming all input")
			}
		}
	}
	if cap(d.scratch) > wireTestMaxBuffer {
		panic(fmt.Sprintf("scratch grew to %d bytes, over the %d-byte limit", cap(d.scratch), wireTestMaxBuffer))
	}
	return out, nil
}

func equalFrames(a, b []frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].typ != b[i].typ || !bytes.Equal(a[i].payload, b[i].payload) {
			return false
		}
	}
	return true
}

func TestFrameDecoderSplitEverywhere(t *testing.T) {
	stream, want := validStream()
	got, err := decodeChunks(true, stream)
	if err != nil || !equalFrames(got, want) {
		t.Fatalf("whole stream: %d frames, err %v; want %d frames", len(got), err, len(want))
	}
	for i := 0; i <= len(stream); i++ {
		got, err := decodeChunks(true, stream[:i], stream[i:])
		if err != nil || !equalFrames(got, want) {
			t.Fatalf("split at %d: %d frames, err %v; want %d frames", i, len(got), err, len(want))
		}
	}
	var bytewise [][]byte
	for i := range stream {
		bytewise = append(bytewise, stream[i:i+1])
	}
	if got, err := decodeChunks(true, bytewise...); err != nil || !equalFrames(got, want) {
		t.Fatalf("byte by byte: %d frames, err %v", len(got), err)
	}
	rng := rand.New(rand.NewSource(1))
	for trial := 0; trial < 200; trial++ {
		var chunks [][]byte
		for p := stream; len(p) > 0; {
			k := min(len(p), 1+rng.Intn(40))
			chunks, p = append(chunks, p[:k]), p[k:]
		}
		if got, err := decodeChunks(true, chunks...); err != nil || !equalFrames(got, want) {
			t.Fatalf("random chunks (trial %d): %d frames, err %v", trial, len(got), err)
		}
	}
}

func TestPartitionRequestRoundTrip(t *testing.T) {
	for _, r := range []partitionRequest{
		{},
		{
			partition:    ident.PartitionID{Result: -1, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 1 << 30, Index: -7}, Number: 3}},
			subpartition: 1<<31 - 1, consumer: ident.Attempt{Subtask: ident.Subtask{Vertex: -2, Index: 9}, Number: 1 << 20},
			credit: 12, bufferSize: DefaultBufferSize,
			job:        [JobIDSize]byte{0: 0xff, 15: 0x01},
			credential: PartitionCredential([]byte("secret"), [JobIDSize]byte{0: 0xff, 15: 0x01}, testPID, 3, testConsumer),
		},
	} {
		b := appendPartitionRequest(nil, r)
		if len(b) != frameHeaderSize+partitionRequestSize {
			t.Fatalf("encoded request has %d bytes", len(b))
		}
		if got := parsePartitionRequest(b[frameHeaderSize:]); got != r {
			t.Fatalf("round trip: got %+v, want %+v", got, r)
		}
	}
}

func TestErrorFrames(t *testing.T) {
	for _, sentinel := range []error{ErrPartitionNotFound, ErrPartitionNotReady, ErrPartitionReleased, ErrStaleAttempt,
		ErrAlreadyConsumed, ErrViewReleased, ErrInvalidRequest, ErrProtocol, ErrCorrupt, ErrBadCredential} {
		err := fmt.Errorf("subpartition r1@v0[0]#0/0: %w", sentinel)
		b := appendErrorFrame(nil, codeOf(err), err.Error())
		frames, derr := decodeChunks(false, b)
		if derr != nil || len(frames) != 1 {
			t.Fatalf("%v: decode: %v", sentinel, derr)
		}
		remote := parseErrorFrame(frames[0].payload)
		if !errors.Is(remote, sentinel) || !strings.Contains(remote.Error(), err.Error()) {
			t.Fatalf("remote error %q does not unwrap to %v", remote, sentinel)
		}
		if sentinel == ErrPartitionNotReady && !errors.Is(remote, ErrPartitionNotFound) {
			t.Fatalf("remote error %q does not unwrap to ErrPartitionNotFound: a client would not retry it", remote)
		}
	}
	if r := parseErrorFrame(appendErrorFrame(nil, codeOf(errors.New("disk on fire")), "disk on fire")[frameHeaderSize:]); errors.Unwrap(r) != nil {
		t.Fatalf("an unclassified error unwraps to %v", errors.Unwrap(r))
	}
	// Long messages are cut, never rejected by the peer.
	long := strings.Repeat("é", maxErrorMessageBytes)
	b := appendErrorFrame(nil, codeInternal, long)
	frames, err := decodeChunks(false, b)
	if err != nil || len(frames) != 1 || len(frames[0].payload) > maxControlPayload {
		t.Fatalf("long message: %v", err)
	}
}

func TestFrameDecoderRejects(t *testing.T) {
	hdr := func(t frameType, n uint32) []byte { return appendFrameHeader(nil, t, int(n)) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	pre := wirePreamble[:]
	cases := []struct {
		name     string
		preamble bool
		allowed  frameSet
		input    []byte
		want     string
	}{
		{"not a runnel client", true, allFrames, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), `bad preamble "GET / HTTP/1.1\r\nHost: x\r\n\r\n"`},
		{"magic cut short", true, allFrames, []byte("RNDX"), `bad preamble "RNDX"`},
		{"version 1", true, allFrames, []byte{'R', 'N', 'D', 'P', 1, 0, 0, 0}, "unsupported protocol version 1 (reserved 00 00), this server speaks version 3"},
		{"version 2", true, allFrames, []byte{'R', 'N', 'D', 'P', 2, 0, 0, 0}, "unsupported protocol version 2 (reserved 00 00), this server speaks version 3"},
		{"newer version", true, allFrames, []byte{'R', 'N', 'D', 'P', 4, 0, 0, 0}, "unsupported protocol version 4"},
		{"reserved bytes", true, allFrames, []byte{'R', 'N', 'D', 'P', 3, 0, 0, 1}, "reserved 00 01"},
		{"unknown type", true, allFrames, cat(pre, []byte{0x7f, 1, 2, 3, 4, 5}), "unexpected frame type frame(127) at stream offset 8 (bytes 7f 01 02 03 04 05)"},
		{"type zero", false, allFrames, []byte{0}, "unexpected frame type frame(0)"},
		{"not allowed now", false, serverStreamFrames, hdr(frameBuffer, 30), "unexpected frame type Buffer"},
		{"buffer over the negotiated size", false, allFrames, hdr(frameBuffer, wireTestMaxBuffer+1), "Buffer frame of 257 bytes, want 20 to 256"},
		{"buffer of 4 GiB", false, allFrames, hdr(frameBuffer, 1<<32-1), "Buffer frame of 4294967295 bytes"},
		{"buffer shorter than its header", false, allFrames, hdr(frameBuffer, HeaderSize-1), "Buffer frame of 19 bytes"},
		{"request too long", true, allFrames, cat(pre, hdr(framePartitionRequest, 1000)), "PartitionRequest frame of 1000 bytes, want 96"},
		{"version 1 request", true, allFrames, cat(pre, hdr(framePartitionRequest, 40)), "PartitionRequest frame of 40 bytes, want 96"},
		{"credit too long", false, allFrames, cat(appendAddCredit(nil, 1), hdr(frameAddCredit, 5)), "AddCredit frame of 5 bytes, want 4 at stream offset 9"},
		{"close with payload", false, allFrames, hdr(frameClose, 1), "Close frame of 1 bytes, want 0"},
		{"empty error", false, allFrames, hdr(frameError, 0), "Error frame of 0 bytes, want 1 to 513"},
		{"error too long", false, allFrames, hdr(frameError, 1<<20), "Error frame of 1048576 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := newFrameDecoder(tc.preamble, tc.allowed, wireTestMaxBuffer)
			var err error
			for p := tc.input; len(p) > 0 && err == nil; {
				var n int
				n, _, _, err = d.decode(p)
				p = p[n:]
			}
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("got %v, want ErrProtocol", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
			if len(err.Error()) > 250 {
				t.Fatalf("error message of %d bytes is not bounded: %q", len(err.Error()), err)
			}
			if d.scratch != nil {
				t.Fatalf("decoder allocated %d bytes of scratch for a rejected frame", cap(d.scratch))
			}
			if _, _, _, again := d.decode([]byte{1}); again != err {
				t.Fatalf("decoder not dead after an error: %v", again)
			}
		})
	}
}

// FuzzFrameDecoder feeds arbitrary bytes: the decoder must never panic, never exceed its scratch bound, and
// decode the same frames (and fail or not) whether the input comes whole, split at one point, or byte by
// byte.
func FuzzFrameDecoder(f *testing.F) {
	stream, _ := validStream()
	f.Add(stream, true, uint16(17))
	f.Add(stream[preambleSize:], false, uint16(3))
	f.Add([]byte("GET / HTTP/1.1\r\n"), true, uint16(1))
	f.Add(appendFrameHeader(nil, frameBuffer, 1<<31), false, uint16(2))
	f.Add(append(appendFrameHeader(nil, frameBuffer, 30), make([]byte, 30)...), false, uint16(7))
	// A version-1 client: its preamble, then its 40-byte request.
	v1 := append([]byte{'R', 'N', 'D', 'P', 1, 0, 0, 0}, appendFrameHeader(nil, framePartitionRequest, requestIntsSize)...)
	f.Add(append(v1, make([]byte, requestIntsSize)...), true, uint16(9))
	// A version-2 request alone, cut where version 1 ended it.
	req := appendPartitionRequest(nil, partitionRequest{partition: testPID, consumer: testConsumer, credit: 1, bufferSize: 64})
	f.Add(req, false, uint16(frameHeaderSize+requestIntsSize))
	f.Fuzz(func(t *testing.T, data []byte, preamble bool, split uint16) {
		whole, wholeErr := decodeChunks(preamble, data)
		check := func(how string, got []frame, err error) {
			if !equalFrames(got, whole) || (err == nil) != (wholeErr == nil) {
				t.Fatalf("%s: %d frames, err %v; whole: %d frames, err %v", how, len(got), err, len(whole), wholeErr)
			}
			if err != nil && !errors.Is(err, ErrProtocol) {
				t.Fatalf("%s: error %v is not ErrProtocol", how, err)
			}
		}
		i := int(split) % (len(data) + 1)
		got, err := decodeChunks(preamble, data[:i], data[i:])
		check(fmt.Sprintf("split at %d", i), got, err)
		if len(data) <= 512 {
			chunks := make([][]byte, len(data))
			for j := range data {
				chunks[j] = data[j : j+1]
			}
			got, err := decodeChunks(preamble, chunks...)
			check("byte by byte", got, err)
		}
	})
}

// FuzzFrameDecoderSplitValid builds a valid stream from fuzzed frame contents and checks that every split
// point yields the same frames.
func FuzzFrameDecoderSplitValid(f *testing.F) {
	f.Add([]byte("payload"), uint32(5), "message")
	f.Add([]byte{}, uint32(0), "")
	f.Fuzz(func(t *testing.T, payload []byte, credit uint32, msg string) {
		if len(payload) > wireTestMaxBuffer-HeaderSize {
			payload = payload[:wireTestMaxBuffer-HeaderSize]
		}
		var stream []byte
		buf := sealedBuffer(KindData, payload, uint64(credit), 0)
		stream = appendFrameHeader(stream, frameBuffer, len(buf))
		stream = append(stream, buf...)
		stream = appendAddCredit(stream, credit)
		stream = appendErrorFrame(stream, errorCode(credit), msg)
		stream = append(stream, closeFrame...)
		want, err := decodeChunks(false, stream)
		if err != nil || len(want) != 4 || !bytes.Equal(want[0].payload, buf) {
			t.Fatalf("whole stream: %d frames, %v", len(want), err)
		}
		for i := 0; i <= len(stream); i++ {
			got, err := decodeChunks(false, stream[:i], stream[i:])
			if err != nil || !equalFrames(got, want) {
				t.Fatalf("split at %d: %d frames, %v", i, len(got), err)
			}
		}
	})
}
