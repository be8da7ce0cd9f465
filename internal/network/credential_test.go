package network

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-dev/runnel/internal/ident"
)

var (
	testSecret = []byte("0123456789abcdef0123456789abcdef")
	testJob    = [JobIDSize]byte{0x52, 0x4e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
)

// TestPartitionCredentialLayout pins the documented layout with a vector computed outside Go (Python's
// hmac over the bytes the layout describes): a job master and a TaskManager built from different versions
// must agree on it, so it may only change with its version.
func TestPartitionCredentialLayout(t *testing.T) {
	secret := make([]byte, 32)
	for i := range secret {
		secret[i] = byte(i)
	}
	var job [JobIDSize]byte
	for i := range job {
		job[i] = byte(0x10 + i)
	}
	p := ident.PartitionID{Result: 7, Producer: ident.Attempt{Subtask: ident.Subtask{Vertex: 3, Index: 2}, Number: 1}}
	consumer := ident.Attempt{Subtask: ident.Subtask{Vertex: 4, Index: -5}, Number: 9}
	got := PartitionCredential(secret, job, p, 5, consumer)
	const want = "264c3c9cbde8cb983cd5d5e8eaa95a759c5a94d6dfa9052d3ca2dc51d6660bc9"
	if hex.EncodeToString(got[:]) != want {
		t.Fatalf("credential %x, want %s", got, want)
	}
}

// TestVerifyCredential: a credential admits exactly the request it was issued for; changing any field the
// credential covers, or the secret, refuses it.
func TestVerifyCredential(t *testing.T) {
	pid := testPID
	owner := testConsumer
	owner.Number = 3
	good := PartitionRequest{Job: testJob, Partition: pid, Subpartition: 1, Consumer: owner, Remote: "127.0.0.1:1"}
	good.Credential = PartitionCredential(testSecret, testJob, pid, 1, owner)
	cases := []struct {
		name   string
		change func(r *PartitionRequest) []byte // returns the secret to verify with
		ok     bool
	}{
		{"as issued", func(*PartitionRequest) []byte { return testSecret }, true},
		{"forged", func(r *PartitionRequest) []byte { r.Credential[0] ^= 1; return testSecret }, false},
		{"none", func(r *PartitionRequest) []byte { r.Credential = [CredentialSize]byte{}; return testSecret }, false},
		{"other secret", func(*PartitionRequest) []byte { return []byte("another job's secret") }, false},
		{"no secret", func(*PartitionRequest) []byte { return nil }, false},
		{"other job", func(r *PartitionRequest) []byte { r.Job[15]++; return testSecret }, false},
		{"other result", func(r *PartitionRequest) []byte { r.Partition.Result++; return testSecret }, false},
		{"other producer attempt", func(r *PartitionRequest) []byte { r.Partition.Producer.Number++; return testSecret }, false},
		{"other producer subtask", func(r *PartitionRequest) []byte { r.Partition.Producer.Index++; return testSecret }, false},
		{"other subpartition", func(r *PartitionRequest) []byte { r.Subpartition = 0; return testSecret }, false},
		{"higher consumer attempt", func(r *PartitionRequest) []byte { r.Consumer.Number++; return testSecret }, false},
		{"other consumer subtask", func(r *PartitionRequest) []byte { r.Consumer.Index++; return testSecret }, false},
		{"other consumer vertex", func(r *PartitionRequest) []byte { r.Consumer.Vertex++; return testSecret }, false},
		{"remote does not matter", func(r *PartitionRequest) []byte { r.Remote = "10.0.0.1:2"; return testSecret }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			secret := tc.change(&r)
			err := r.VerifyCredential(secret)
			if tc.ok {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadCredential) {
				t.Fatalf("got %v, want ErrBadCredential", err)
			}
			if strings.Contains(err.Error(), hex.EncodeToString(r.Credential[:4])) || bytes.Contains([]byte(err.Error()), secret) && len(secret) > 0 {
				t.Fatalf("error %q shows the credential or the secret", err)
			}
		})
	}
}

// credentialEnv is a data server whose Admit checks credentials with testSecret, and its log.
type credentialEnv struct {
	*testEnv
	logs   *syncBuffer
	admits atomic.Int64 // calls of Admit
}

func newCredentialEnv(t *testing.T) *credentialEnv {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // registered first, so it runs last
	e := &credentialEnv{testEnv: &testEnv{t: t, pm: NewPartitionManager()}, logs: &syncBuffer{}}
	srv, err := NewServer(e.pm, "127.0.0.1:0", ServerOptions{
		Logger: slog.New(slog.NewTextHandler(e.logs, nil)),
		Admit: func(r PartitionRequest) (*PartitionManager, error) {
			e.admits.Add(1)
			return nil, r.VerifyCredential(testSecret)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	t.Cleanup(e.close)
	return e
}

// dial opens a reader on subpartition sub of pid as attempt of testConsumer, presenting credential.
func (e *credentialEnv) dial(pid ident.PartitionID, sub int, attempt int32, job [JobIDSize]byte, credential [CredentialSize]byte) (*reader, error) {
	r := newReader(e.t)
	owner := testConsumer
	owner.Number = attempt
	pool := NewBufferPool("consumer "+owner.String(), 128, 2)
	ch, err := DialRemoteChannel(context.Background(), e.srv.Addr(), pid, sub, owner, pool, 2, r.notify,
		DialOptions{Job: job, Credential: credential, Timeout: testWait})
	if err != nil {
		return nil, err
	}
	e.chans = append(e.chans, ch)
	e.pools = append(e.pools, pool)
	r.ch = ch
	return r, nil
}

// issued is the credential the job master would issue for the request.
func issued(pid ident.PartitionID, sub int, attempt int32) [CredentialSize]byte {
	owner := testConsumer
	owner.Number = attempt
	return PartitionCredential(testSecret, testJob, pid, sub, owner)
}

// TestBadCredentialsDoNotFenceTheConsumer is the attack credentials exist for, over real sockets: while the
// real consumer (attempt 1) streams from a reconnectable subpartition, requests with a forged credential,
// with a credential issued for another subpartition, attempt, job or producer attempt, or with none, all
// claiming a newer consumer attempt (which, admitted, would replace the real consumer's view for good), are
// refused with ErrBadCredential at once. The real consumer's view stays attached and it receives every
// record, in order; one log line reports the refusals.
func TestBadCredentialsDoNotFenceTheConsumer(t *testing.T) {
	env := newCredentialEnv(t)
	const records = 2000
	p, pool := env.partition(1, 128, 8, PartitionOptions{Reconnectable: true, Subpartitions: 2})
	pid := p.ID()
	sizes := sizesOf(records, 100)
	real, err := env.dial(pid, 0, 1, testJob, issued(pid, 0, 1))
	if err != nil {
		t.Fatalf("the real consumer was refused: %v", err)
	}
	produced := produce(p, sizes, true)
	otherProducer := pid
	otherProducer.Producer.Number++
	random := [CredentialSize]byte{}
	copy(random[:], "not a credential, just some bytes")
	otherJob := testJob
	otherJob[0]++
	intruders := []struct {
		name       string
		sub        int
		attempt    int32
		job        [JobIDSize]byte
		credential [CredentialSize]byte
	}{
		{"forged", 0, 2, testJob, random},
		{"none", 0, 3, testJob, [CredentialSize]byte{}},
		{"the real consumer's, claiming a higher attempt", 0, 4, testJob, issued(pid, 0, 1)},
		{"issued for the other subpartition", 0, 5, testJob, issued(pid, 1, 5)},
		{"issued for another attempt", 0, 6, testJob, issued(pid, 0, 7)},
		{"issued for the producer's next attempt", 0, 8, testJob, issued(otherProducer, 0, 8)},
		{"right credential, other job id", 0, 9, otherJob, issued(pid, 0, 9)},
	}
	for i, in := range intruders {
		// The real consumer is mid-stream when each intruder comes.
		want := (i + 1) * records / (len(intruders) + 1)
		if err := real.readUntil(func() bool { return len(real.got) >= want }); err != nil {
			t.Fatalf("before intruder %q: the real consumer: %v", in.name, err)
		}
		start := time.Now()
		_, err := env.dial(pid, in.sub, in.attempt, in.job, in.credential)
		if !errors.Is(err, ErrBadCredential) || !strings.Contains(err.Error(), "partition request refused: bad credential") {
			// Not fatal: what an admitted intruder does to the real consumer is checked below.
			t.Errorf("intruder %q: got %v, want ErrBadCredential", in.name, err)
			continue
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("intruder %q was refused after %v: retried instead of refused at once", in.name, d)
		}
	}
	if err := real.readToEnd(); err != nil {
		t.Fatalf("the real consumer after the intruders: %v", err)
	}
	checkRecords(t, real.got, sizes)
	wait(t, produced)
	st := p.Stats()
	if st.ViewsCreated != 1 || st.RecordsDropped != 0 {
		t.Fatalf("partition stats %+v: a refused request touched the views", st)
	}
	if got := env.srv.Stats().BadCredentials; got != uint64(len(intruders)) {
		t.Fatalf("server counted %d bad credentials, want %d", got, len(intruders))
	}
	if got := env.logs.lines("refused a partition request"); len(got) != 1 || !strings.Contains(got[0], "does not match") {
		t.Fatalf("log lines about refused requests: %q, want one with the reason", got)
	}
	real.ch.Release()
	env.waitIdle()
	p.Close()
	p.Release() // the unread subpartition holds its end-of-partition for a reader that may come
	if pool.Available() != pool.Limit() {
		t.Fatalf("producer buffers leaked: %d of %d available", pool.Available(), pool.Limit())
	}
}

// TestRightCredentialIsAdmitted: a request with the credential issued for it is served like one to a
// server without Admit, and a newer attempt with its own credential replaces the older one as reconnection
// requires; Admit sees every request exactly once.
func TestRightCredentialIsAdmitted(t *testing.T) {
	env := newCredentialEnv(t)
	p, _ := env.partition(1, 128, 8, PartitionOptions{})
	sizes := sizesOf(500, 300)
	r, err := env.dial(p.ID(), 0, 0, testJob, issued(p.ID(), 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	produced := produce(p, sizes, true)
	if err := r.readToEnd(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, r.got, sizes)
	wait(t, produced)

	q, _ := env.partition(2, 128, 8, PartitionOptions{Reconnectable: true})
	first, err := env.dial(q.ID(), 0, 1, testJob, issued(q.ID(), 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.dial(q.ID(), 0, 2, testJob, issued(q.ID(), 0, 2)); err != nil {
		t.Fatalf("the next attempt, with its credential: %v", err)
	}
	if err := first.pollError(); !errors.Is(err, ErrViewReleased) {
		t.Fatalf("the replaced attempt got %v, want ErrViewReleased", err)
	}
	if n := env.admits.Load(); n != 3 {
		t.Fatalf("Admit was called %d times for 3 requests", n)
	}
	if st := env.srv.Stats(); st.BadCredentials != 0 {
		t.Fatalf("stats %+v, want no refusals", st)
	}
}

// TestAdmitBeforeLookup: Admit runs before the server looks for the partition, so a refused request cannot
// tell a partition that exists from one that does not; an Admit error wrapping ErrPartitionNotFound (the job
// is not set up on this TaskManager yet) is retried by the client like a producer not deployed yet; and the
// PartitionManager Admit returns is the one served from.
func TestAdmitBeforeLookup(t *testing.T) {
	defer goleak.VerifyNone(t)
	own, jobs := NewPartitionManager(), NewPartitionManager()
	var calls atomic.Int64
	srv, err := NewServer(own, "127.0.0.1:0", ServerOptions{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Admit: func(r PartitionRequest) (*PartitionManager, error) {
			if calls.Add(1) <= 3 {
				return nil, fmt.Errorf("job %x is not set up here: %w", r.Job, ErrPartitionNotFound)
			}
			if err := r.VerifyCredential(testSecret); err != nil {
				return nil, err
			}
			return jobs, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pool := NewBufferPool("producer", 128, 4)
	p, err := NewResultPartition(testPID, PartitionOptions{Subpartitions: 1}, pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := jobs.Register(p); err != nil {
		t.Fatal(err)
	}
	defer p.Release()
	dial := func(pid ident.PartitionID, credential [CredentialSize]byte) error {
		cpool := NewBufferPool("consumer", 128, 1)
		ch, err := DialRemoteChannel(context.Background(), srv.Addr(), pid, 0, testConsumer, cpool, 1, nil,
			DialOptions{Job: testJob, Credential: credential, InitialBackoff: time.Millisecond, Timeout: testWait})
		if err == nil {
			ch.Release()
		}
		return err
	}
	if err := dial(testPID, issued(testPID, 0, 0)); err != nil {
		t.Fatalf("after the job was set up: %v", err)
	}
	if n := calls.Load(); n != 4 {
		t.Fatalf("Admit called %d times, want 3 not-found answers and the admission", n)
	}
	missing := testPID
	missing.Result = 99
	for _, pid := range []ident.PartitionID{testPID, missing} {
		err := dial(pid, [CredentialSize]byte{})
		if !errors.Is(err, ErrBadCredential) || errors.Is(err, ErrPartitionNotFound) {
			t.Fatalf("partition %s without a credential: got %v, want ErrBadCredential alone", pid, err)
		}
	}
}

// TestVersion1ClientRefused speaks protocol version 1 (its preamble and its 40-byte request) to a version-2
// server, with and without Admit: the answer is an Error frame naming both versions, then the close, and
// no view is created.
func TestVersion1ClientRefused(t *testing.T) {
	for _, admit := range []bool{false, true} {
		t.Run(fmt.Sprintf("admit=%v", admit), func(t *testing.T) {
			var env *testEnv
			if admit {
				env = newCredentialEnv(t).testEnv
			} else {
				env = newTestEnv(t, true)
			}
			p, _ := env.partition(1, 64, 4, PartitionOptions{Reconnectable: true})
			v1 := []byte{'R', 'N', 'D', 'P', 1, 0, 0, 0}
			req := appendPartitionRequest(nil, partitionRequest{partition: p.ID(), consumer: testConsumer, credit: 1, bufferSize: 64})
			v1 = appendFrameHeader(v1, framePartitionRequest, requestIntsSize)
			v1 = append(v1, req[frameHeaderSize:frameHeaderSize+requestIntsSize]...)
			frames := rawExchange(t, env.srv.Addr(), v1)
			if len(frames) != 1 || frames[0].typ != frameError {
				t.Fatalf("got frames %v, want one Error frame", frames)
			}
			rerr := parseErrorFrame(frames[0].payload)
			if !errors.Is(rerr, ErrProtocol) || !strings.Contains(rerr.Error(), "unsupported protocol version 1") ||
				!strings.Contains(rerr.Error(), "this server speaks version 3") {
				t.Fatalf("got %v, want ErrProtocol naming versions 1 and 2", rerr)
			}
			if st := p.Stats(); st.ViewsCreated != 0 {
				t.Fatalf("a version-1 request created a view: %+v", st)
			}
		})
	}
}

// rawExchange sends msg on a new connection to addr and returns the frames the server sends until it
// closes.
func rawExchange(t *testing.T, addr string, msg []byte) []frame {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(testWait))
	if _, err := conn.Write(msg); err != nil {
		t.Fatal(err)
	}
	d := newFrameDecoder(false, allFrames, 64)
	var frames []frame
	buf := make([]byte, 1024)
	for {
		n, rerr := conn.Read(buf)
		for q := buf[:n]; len(q) > 0; {
			k, f, ok, err := d.decode(q)
			q = q[k:]
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				frames = append(frames, frame{f.typ, bytes.Clone(f.payload)})
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				t.Fatalf("server did not close cleanly: %v", rerr)
			}
			return frames
		}
	}
}

// BenchmarkPartitionCredential is the per-request cost of a credential, issued or verified.
func BenchmarkPartitionCredential(b *testing.B) {
	r := PartitionRequest{Job: testJob, Partition: testPID, Consumer: testConsumer}
	r.Credential = PartitionCredential(testSecret, testJob, testPID, 0, testConsumer)
	b.ReportAllocs()
	for b.Loop() {
		if err := r.VerifyCredential(testSecret); err != nil {
			b.Fatal(err)
		}
	}
}
