package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rpc/pb"
)

// SubmitRequest asks a JobManager to run a job of its binary's registry.
type SubmitRequest struct {
	Name string
	Args []string
	// Graph is graph.Fingerprint of the client's build of the job: the JobManager refuses the job when its
	// own build differs.
	Graph [32]byte
	// Build is the client's binary, which must be the JobManager's.
	Build protocol.Build
}

// JobStatus is a job as it stands, sent while a Watch lasts.
type JobStatus struct {
	// ResultJSON is the job's JobResult as JSON (the --report contract).
	ResultJSON []byte
	// Final marks the last status: the job ended, Accumulators holds the merged accumulator values and
	// Error the job's error text ("" when it finished).
	Final        bool
	Accumulators map[string][]byte
	Error        string
}

// JobService is what a JobManager serves to clients (`runnel submit`, `runnel cancel`). Errors cross with
// their text; one wrapping ErrRefused or ErrUnknownJob crosses as such (InvalidArgument, NotFound), so the
// client's error satisfies errors.Is with it too.
type JobService interface {
	// Submit starts a job and returns its id.
	Submit(ctx context.Context, req SubmitRequest) (protocol.JobID, error)
	// Watch calls send with the job's status until it ended (the last one Final) or ctx is done; an error
	// of send (the client went away) ends it with that error.
	Watch(ctx context.Context, job protocol.JobID, send func(JobStatus) error) error
	// Stop stops a job, with a savepoint in savepointDir ("": the job's own savepoint-on-stop directory,
	// and without one it is cancelled).
	Stop(ctx context.Context, job protocol.JobID, savepointDir string) error
}

var (
	// ErrRefused marks a submission the JobManager refuses (an unknown job name, another build, a graph
	// that differs, a configuration a cluster cannot run).
	ErrRefused = errors.New("submission refused")
	// ErrUnreachable marks a call the JobManager did not answer (not listening, the connection lost).
	ErrUnreachable = errors.New("the JobManager did not answer")
	// ErrUnknownJob marks a job id the JobManager does not know.
	ErrUnknownJob = errors.New("unknown job")
)

// RegisterJobService serves svc on s as the JobManager service.
func RegisterJobService(s grpc.ServiceRegistrar, svc JobService) {
	pb.RegisterJobManagerServer(s, &jobServer{svc: svc})
}

// jobServer adapts a JobService to the generated server interface.
type jobServer struct {
	pb.UnimplementedJobManagerServer
	svc JobService
}

func (j *jobServer) Submit(ctx context.Context, req *pb.SubmitRequest) (*pb.SubmitReply, error) {
	r := SubmitRequest{Name: req.GetName(), Args: nilIfEmpty(req.GetArgs())}
	if err := decodeFixed(r.Graph[:], req.GetGraph(), "graph fingerprint"); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	build, err := decodeBuild(req.GetBuild())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	r.Build = build
	id, err := j.svc.Submit(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.SubmitReply{Job: bytesOfJob(id)}, nil
}

func (j *jobServer) Watch(req *pb.WatchRequest, st grpc.ServerStreamingServer[pb.JobStatus]) error {
	id, err := decodeJob(req.GetJob())
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return toStatus(j.svc.Watch(st.Context(), id, func(s JobStatus) error {
		return st.Send(&pb.JobStatus{ResultJson: cloneBytes(s.ResultJSON), Final: s.Final, Accumulators: cloneValues(s.Accumulators),
			Error: s.Error})
	}))
}

func (j *jobServer) Stop(ctx context.Context, req *pb.StopRequest) (*pb.StopReply, error) {
	id, err := decodeJob(req.GetJob())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := j.svc.Stop(ctx, id, req.GetSavepointDir()); err != nil {
		return nil, toStatus(err)
	}
	return &pb.StopReply{}, nil
}

// toStatus turns a service error into the gRPC status it crosses as, keeping its text.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) {
		return err
	}
	code := codes.Unknown
	switch {
	case errors.Is(err, ErrRefused):
		code = codes.InvalidArgument
	case errors.Is(err, ErrUnknownJob):
		code = codes.NotFound
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	}
	return status.Error(code, err.Error())
}

// JobClient calls a JobManager's JobService.
type JobClient struct {
	c pb.JobManagerClient
}

// NewJobClient returns a client over conn, which should be made with DialOptions and the credentials. The
// caller owns conn.
func NewJobClient(conn grpc.ClientConnInterface) *JobClient {
	return &JobClient{c: pb.NewJobManagerClient(conn)}
}

// Submit submits a job; a refusal satisfies errors.Is(err, ErrRefused) and has the JobManager's text.
func (c *JobClient) Submit(ctx context.Context, req SubmitRequest) (protocol.JobID, error) {
	r, err := c.c.Submit(ctx, &pb.SubmitRequest{Name: req.Name, Args: cloneStrings(req.Args), Graph: fixedBytes(req.Graph[:]),
		Build: encodeBuild(req.Build)})
	if err != nil {
		return protocol.JobID{}, fromStatus(ctx, "submit", err)
	}
	id, err := decodeJob(r.GetJob())
	if err != nil {
		return id, fmt.Errorf("submit: the JobManager answered with a %w", err)
	}
	return id, nil
}

// Watch follows a job, calling send with every status until the last (Final) one; it returns send's error
// if send fails.
func (c *JobClient) Watch(ctx context.Context, job protocol.JobID, send func(JobStatus) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when send fails
	st, err := c.c.Watch(ctx, &pb.WatchRequest{Job: bytesOfJob(job)})
	if err != nil {
		return fromStatus(ctx, "watch", err)
	}
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fromStatus(ctx, "watch", err)
		}
		s := JobStatus{ResultJSON: nilIfEmpty(m.GetResultJson()), Final: m.GetFinal(), Accumulators: decodeValues(m.GetAccumulators()),
			Error: m.GetError()}
		if err := send(s); err != nil {
			return err
		}
	}
}

// Stop stops a job (see JobService.Stop); an unknown job satisfies errors.Is(err, ErrUnknownJob).
func (c *JobClient) Stop(ctx context.Context, job protocol.JobID, savepointDir string) error {
	if _, err := c.c.Stop(ctx, &pb.StopRequest{Job: bytesOfJob(job), SavepointDir: savepointDir}); err != nil {
		return fromStatus(ctx, "stop", err)
	}
	return nil
}

// bytesOfJob encodes a job id for the client service, where the zero id is still sent as 16 bytes.
func bytesOfJob(j protocol.JobID) []byte { return append([]byte(nil), j[:]...) }

// fromStatus turns what a JobService call failed with into the client's error: a service error with the
// service's text (and ErrRefused, ErrUnknownJob), anything else (the JobManager unreachable, ctx done)
// wrapped with the call.
func fromStatus(ctx context.Context, call string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", call, ctx.Err())
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w", call, err)
	}
	switch st.Code() {
	case codes.InvalidArgument:
		return &serviceError{st: st, is: ErrRefused}
	case codes.NotFound:
		return &serviceError{st: st, is: ErrUnknownJob}
	case codes.Unknown:
		return &serviceError{st: st}
	}
	return fmt.Errorf("%s: %w: %w", call, ErrUnreachable, err)
}

// serviceError is an error a JobService returned, as the client sees it: the service's text.
type serviceError struct {
	st *status.Status
	is error // ErrRefused, ErrUnknownJob or nil
}

func (e *serviceError) Error() string              { return e.st.Message() }
func (e *serviceError) Is(target error) bool       { return e.is != nil && target == e.is }
func (e *serviceError) GRPCStatus() *status.Status { return e.st }
