package rpc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/runnel-dev/runnel/internal/protocol"
)

// jobTable is a small JobService: it knows the job names in names, refuses other names and builds, and
// streams a fixed list of statuses per job.
type jobTable struct {
	build protocol.Build
	names map[string]bool

	mu       sync.Mutex
	jobs     map[protocol.JobID]SubmitRequest
	stopped  map[protocol.JobID]string
	watchEnd chan error // what a Watch ended with, when it was cut short
}

func (j *jobTable) Submit(_ context.Context, req SubmitRequest) (protocol.JobID, error) {
	if !j.names[req.Name] {
		return protocol.JobID{}, fmt.Errorf("%w: no job %q is registered in this binary", ErrRefused, req.Name)
	}
	if req.Build != j.build {
		return protocol.JobID{}, fmt.Errorf("the client runs %s, the JobManager runs %s: %w", req.Build.Describe, j.build.Describe, ErrRefused)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	id := protocol.JobID{byte(len(j.jobs) + 1), 0xee}
	j.jobs[id] = req
	return id, nil
}

func (j *jobTable) Watch(ctx context.Context, id protocol.JobID, send func(JobStatus) error) error {
	j.mu.Lock()
	req, ok := j.jobs[id]
	j.mu.Unlock()
	if !ok {
		return fmt.Errorf("job %s: %w", id, ErrUnknownJob)
	}
	for i := range 3 {
		s := JobStatus{ResultJSON: fmt.Appendf(nil, `{"job":%q,"step":%d}`, req.Name, i)}
		if i == 2 {
			s.Final, s.Accumulators, s.Error = true, map[string][]byte{"checker": {1, 2, 3}}, "job failed: boom"
		}
		if err := send(s); err != nil {
			return err
		}
	}
	if req.Name == "endless" {
		<-ctx.Done() // until the client goes away
		j.watchEnd <- ctx.Err()
		return ctx.Err()
	}
	return nil
}

func (j *jobTable) Stop(_ context.Context, id protocol.JobID, dir string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.jobs[id]; !ok {
		return fmt.Errorf("job %s: %w", id, ErrUnknownJob)
	}
	if dir == "/full" {
		return errors.New("savepoint to /full: no space left on device")
	}
	j.stopped[id] = dir
	return nil
}

// TestJobService: the client service's calls cross a real loopback connection; errors keep their text
// and cross as InvalidArgument (refused), NotFound (unknown job) or Unknown (anything else).
func TestJobService(t *testing.T) {
	build := protocol.Build{Sum: [32]byte{1, 2}, Describe: "runnel test"}
	svc := &jobTable{build: build, names: map[string]bool{"sequence": true, "endless": true},
		jobs: map[protocol.JobID]SubmitRequest{}, stopped: map[protocol.JobID]string{}, watchEnd: make(chan error, 1)}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(ServerOptions()...)
	RegisterJobService(srv, svc)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	defer func() {
		srv.Stop()
		<-served
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := NewJobClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	req := SubmitRequest{Name: "sequence", Args: []string{"--records", "100", "\xff"}, Graph: [32]byte{9, 9}, Build: build}
	id, err := c.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := svc.jobs[id]; !reflect.DeepEqual(got, req) {
		t.Fatalf("the service got %+v, want %+v", got, req)
	}

	t.Run("submit refused", func(t *testing.T) {
		for _, tc := range []struct {
			req  SubmitRequest
			want string
		}{
			{SubmitRequest{Name: "wordcount", Build: build}, `submission refused: no job "wordcount" is registered in this binary`},
			{SubmitRequest{Name: "sequence", Build: protocol.Build{Describe: "runnel other"}},
				"the client runs runnel other, the JobManager runs runnel test: submission refused"},
		} {
			_, err := c.Submit(ctx, tc.req)
			if !errors.Is(err, ErrRefused) || err.Error() != tc.want || status.Code(err) != codes.InvalidArgument {
				t.Errorf("Submit: %v (code %s), want ErrRefused with %q", err, status.Code(err), tc.want)
			}
		}
	})

	t.Run("watch", func(t *testing.T) {
		var got []JobStatus
		if err := c.Watch(ctx, id, func(s JobStatus) error { got = append(got, s); return nil }); err != nil {
			t.Fatal(err)
		}
		want := []JobStatus{
			{ResultJSON: []byte(`{"job":"sequence","step":0}`)},
			{ResultJSON: []byte(`{"job":"sequence","step":1}`)},
			{ResultJSON: []byte(`{"job":"sequence","step":2}`), Final: true, Accumulators: map[string][]byte{"checker": {1, 2, 3}},
				Error: "job failed: boom"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("statuses %+v, want %+v", got, want)
		}
	})

	t.Run("watch cut short by the client", func(t *testing.T) {
		endless, err := c.Submit(ctx, SubmitRequest{Name: "endless", Build: build})
		if err != nil {
			t.Fatal(err)
		}
		enough := errors.New("seen enough")
		n := 0
		err = c.Watch(ctx, endless, func(JobStatus) error {
			if n++; n == 3 {
				return enough
			}
			return nil
		})
		if !errors.Is(err, enough) {
			t.Fatalf("Watch: %v, want send's error", err)
		}
		select {
		case err := <-svc.watchEnd:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("the service's Watch ended with %v, want its context cancelled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the service's Watch went on after the client left")
		}
	})

	t.Run("unknown job", func(t *testing.T) {
		unknown := protocol.JobID{0x42}
		want := "job " + unknown.String() + ": unknown job"
		err := c.Watch(ctx, unknown, func(JobStatus) error { t.Fatal("a status of an unknown job"); return nil })
		if !errors.Is(err, ErrUnknownJob) || err.Error() != want || status.Code(err) != codes.NotFound {
			t.Errorf("Watch: %v (code %s), want ErrUnknownJob with %q", err, status.Code(err), want)
		}
		err = c.Stop(ctx, unknown, "")
		if !errors.Is(err, ErrUnknownJob) || err.Error() != want {
			t.Errorf("Stop: %v, want ErrUnknownJob with %q", err, want)
		}
	})

	t.Run("stop", func(t *testing.T) {
		if err := c.Stop(ctx, id, "/savepoints/a"); err != nil {
			t.Fatal(err)
		}
		if svc.stopped[id] != "/savepoints/a" {
			t.Errorf("the service stopped %v", svc.stopped)
		}
		err := c.Stop(ctx, id, "/full")
		want := "savepoint to /full: no space left on device"
		if err == nil || err.Error() != want || errors.Is(err, ErrRefused) || errors.Is(err, ErrUnknownJob) || status.Code(err) != codes.Unknown {
			t.Errorf("Stop: %v (code %s), want %q", err, status.Code(err), want)
		}
	})

	t.Run("JobManager gone", func(t *testing.T) {
		srv.Stop()
		<-served
		_, err := c.Submit(ctx, req)
		if err == nil || errors.Is(err, ErrRefused) || status.Code(err) != codes.Unavailable {
			t.Errorf("Submit to a stopped JobManager: %v (code %s), want Unavailable", err, status.Code(err))
		}
	})
}
