// Package roles runs the processes of a Runnel cluster: the JobManager (ServeJobManager), the TaskManager
// (ServeTaskManager), and the client that submits a job to a JobManager and watches it (Submit) or stops
// one (Cancel). The jobs come from the binary's registry through Jobs; the roles build them with it and run
// them with the executor. It parses no command line (package cli does) and must not import the root
// package, which calls it.
package roles

import (
	"cmp"
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/runnel-dev/runnel/internal/buildinfo"
	"github.com/runnel-dev/runnel/internal/executor"
	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/jobmaster"
	"github.com/runnel-dev/runnel/internal/metrics"
	"github.com/runnel-dev/runnel/internal/mtls"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/report"
	"github.com/runnel-dev/runnel/internal/rest"
	"github.com/runnel-dev/runnel/internal/rpc"
	"github.com/runnel-dev/runnel/internal/ui"
)

// Jobs are the jobs a binary can run by name (the root package's registry, runnel.Register).
type Jobs interface {
	// Names returns the names of the registered jobs, sorted.
	Names() []string
	// Build builds the registered job name from args and compiles it; a build function that fails or
	// panics is an error naming the job.
	Build(ctx context.Context, name string, args []string) (*executor.Job, error)
}

// buildVerified builds job name with jobs for a process that must run the same job as another: the
// build's fingerprint must be want (the JobManager's, or the client's), or the error says that the build
// function depends on something other than its arguments.
func buildVerified(ctx context.Context, jobs Jobs, name string, args []string, want [32]byte) (*executor.Job, error) {
	job, err := jobs.Build(ctx, name, args)
	if err != nil {
		return nil, err
	}
	if err := executor.SameBuild(name, want, job.Fingerprint); err != nil {
		return nil, err
	}
	return job, nil
}

// Defaults of a cluster's processes.
const (
	DefaultJobManagerAddr    = "127.0.0.1:6123"
	DefaultRESTAddr          = "127.0.0.1:8081"
	DefaultHeartbeatInterval = 500 * time.Millisecond
	DefaultHeartbeatTimeout  = 1500 * time.Millisecond
)

// JobManagerConfig configures ServeJobManager.
type JobManagerConfig struct {
	// Addr is where TaskManagers and clients reach the JobManager (DefaultJobManagerAddr if empty).
	Addr string
	// RESTAddr is where the JSON REST API and the Prometheus metrics are served ("" none).
	RESTAddr string
	// HealthAddr, when set, is where GET /healthz and /healthz/ready alone are served over plain HTTP,
	// also under TLS: for probes that carry no client certificate (a kubelet's).
	HealthAddr string
	// HeartbeatInterval and HeartbeatTimeout: how often the JobManager and its TaskManagers send each
	// other a heartbeat, and the silence after which either declares the other lost. Zero values are the
	// defaults; the timeout must be at least twice the interval.
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// SlotWaitTimeout bounds how long a job waits for slots (a lost TaskManager's replacement) before it
	// fails; zero is the job master's default (5 minutes).
	SlotWaitTimeout time.Duration
	// BufferSize is the network buffer size every TaskManager must use (0: the default).
	BufferSize int
	// TLS, when set, requires mutual TLS on every connection.
	TLS *TLSFiles
	// HA, when set, makes the JobManager one of its cluster's on etcd: it stands by until it leads (a
	// standby runs no jobs and takes no TaskManagers, and its REST API says who leads), and it stops when
	// its term ends. Advertise and RESTAdvertise are then the addresses the others reach it at (default:
	// where it listens, which must then name a host).
	HA                       *ha.Config
	Advertise, RESTAdvertise string
	// Continuity, with HA, makes a new leader take over the tasks that the lost leader's TaskManagers
	// kept running (docs/cluster.md §7); without it, it restarts every job from its latest checkpoint.
	Continuity bool
	Logger     *slog.Logger
	// Listening, when set, is called once the listeners are bound, with their addresses.
	Listening func(addr, restAddr string)
}

// ServeJobManager runs a JobManager until ctx is done: it registers TaskManagers, runs the jobs clients
// submit (each a job registered in this binary, see Register) on their slots, and serves the REST API.
// When ctx is done it cancels the jobs that still run, waits for them, and returns.
func ServeJobManager(ctx context.Context, jobs Jobs, cfg JobManagerConfig) error {
	lg := cmp.Or(cfg.Logger, slog.Default())
	if cfg.Addr == "" {
		cfg.Addr = DefaultJobManagerAddr
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.HeartbeatTimeout == 0 {
		cfg.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if cfg.HeartbeatInterval < 0 || cfg.HeartbeatTimeout < 2*cfg.HeartbeatInterval {
		return fmt.Errorf("jobmanager: --heartbeat-timeout %v must be at least twice --heartbeat-interval %v", cfg.HeartbeatTimeout, cfg.HeartbeatInterval)
	}
	serverTLS, _, err := cfg.TLS.load()
	if err != nil {
		return fmt.Errorf("jobmanager: %w", err)
	}
	build, err := buildinfo.Current()
	if err != nil {
		return fmt.Errorf("jobmanager: %w", err)
	}
	lead := &leadership{}
	if cfg.HA != nil {
		if lead.client, err = ha.Open(ctx, *cfg.HA); err != nil {
			return fmt.Errorf("jobmanager: %w", err)
		}
		defer lead.client.Close()
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("jobmanager: control plane: %w", err)
	}
	if lead.me.Addr = ln.Addr().String(); cfg.HA != nil {
		if lead.me.Addr, err = advertised(cfg.Advertise, ln.Addr(), "control plane", "--advertise-addr"); err != nil {
			_ = ln.Close()
			return fmt.Errorf("jobmanager: %w", err)
		}
	}
	warnIfExposed(lg, "control plane", ln.Addr(), serverTLS != nil)
	dc := jobmaster.DispatcherConfig{Logger: lg, HeartbeatInterval: cfg.HeartbeatInterval,
		HeartbeatTimeout: cfg.HeartbeatTimeout, BufferSize: cfg.BufferSize, Build: build, Epoch: lead.epoch}
	// deposed has one token: a TaskManager said a later term leads.
	deposed := make(chan struct{}, 1)
	dc.Deposed = func(epoch int64) bool {
		if mine := lead.epoch(); mine == 0 || epoch <= mine {
			return false
		}
		select {
		case deposed <- struct{}{}:
		default:
		}
		return true
	}
	var kept *offers
	if cfg.HA != nil && cfg.Continuity {
		kept = newOffers()
		dc.Kept = kept.take
	}
	disp := jobmaster.NewDispatcher(dc)
	jm := &jobManager{cfg: cfg, registry: jobs, log: lg, disp: disp, build: build, lead: lead, jobs: map[protocol.JobID]*jmJob{},
		kept: kept}
	jm.ctx, jm.cancel = context.WithCancelCause(context.Background())
	opts := rpc.ServerOptions()
	if serverTLS != nil {
		opts = append(opts, grpc.Creds(rpc.ServerCredentials(serverTLS, mtls.NewRefusalLog(lg, "control plane"))))
	}
	srv := grpc.NewServer(opts...)
	// A standby takes no TaskManagers: closing the session sends them on to look for the leader.
	rpc.NewGatewayServer(func(s protocol.Session) {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := lead.refuse(rctx)
		cancel()
		if err != nil {
			s.Close(err)
			return
		}
		disp.Attach(s)
	}).Register(srv)
	rpc.RegisterJobService(srv, jm)
	serveErr := make(chan error, 3)
	go func() { serveErr <- srv.Serve(ln) }()

	restAddr := ""
	var hs *http.Server
	if cfg.RESTAddr != "" {
		rln, err := net.Listen("tcp", cfg.RESTAddr)
		if err != nil {
			srv.Stop()
			disp.Close()
			return fmt.Errorf("jobmanager: REST API: %w", err)
		}
		warnIfExposed(lg, "REST API", rln.Addr(), serverTLS != nil)
		restAddr = rln.Addr().String()
		if lead.me.REST = restAddr; cfg.HA != nil {
			if lead.me.REST, err = advertised(cfg.RESTAdvertise, rln.Addr(), "REST API", "--rest-advertise-addr"); err != nil {
				_ = rln.Close()
				srv.Stop()
				disp.Close()
				return fmt.Errorf("jobmanager: %w", err)
			}
		}
		hs = &http.Server{Handler: rest.Handler(jm, jm.metricsHandler(), ui.Handler()), ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout: time.Minute, TLSConfig: serverTLS, ErrorLog: mtls.NewRefusalLog(lg, "REST API").HTTPErrorLog()}
		go func() {
			if serverTLS != nil {
				serveErr <- hs.ServeTLS(rln, "", "")
			} else {
				serveErr <- hs.Serve(rln)
			}
		}()
	}
	if cfg.HealthAddr != "" {
		hln, err := net.Listen("tcp", cfg.HealthAddr)
		if err != nil {
			if hs != nil {
				_ = hs.Close()
			}
			srv.Stop()
			disp.Close()
			return fmt.Errorf("jobmanager: health checks (--health-addr): %w", err)
		}
		health := &http.Server{Handler: rest.HealthHandler(jm), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { serveErr <- health.Serve(hln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = health.Shutdown(sctx)
			cancel()
		}()
		lg.Info("JobManager health checks", "addr", hln.Addr().String())
	}
	lg.Info("JobManager listening", "addr", ln.Addr().String(), "rest", restAddr, "tls", serverTLS != nil,
		"heartbeat_interval", cfg.HeartbeatInterval, "heartbeat_timeout", cfg.HeartbeatTimeout)
	if cfg.Listening != nil {
		cfg.Listening(ln.Addr().String(), restAddr)
	}
	won, campaignFailed, stopCampaign := lead.campaign(lg)
	var failed error
	var termEnded <-chan struct{}
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case err := <-serveErr:
			failed = fmt.Errorf("jobmanager: %w", err)
			break wait
		case err := <-campaignFailed:
			failed = fmt.Errorf("jobmanager: %w", err)
			break wait
		case term := <-won:
			termEnded = term.Done()
			jm.wg.Go(func() { jm.resume(term) })
		case <-deposed:
			failed = fmt.Errorf("jobmanager: lost the leadership of cluster %q (a TaskManager says another JobManager leads); stopping", cfg.HA.Cluster)
			break wait
		case <-termEnded:
			// Etcd did not hear from this JobManager for a lease, or another leads: it must not command
			// any more. It stops; started again, it stands by.
			failed = fmt.Errorf("jobmanager: lost the leadership of cluster %q (etcd unreachable for a lease, or another JobManager leads); stopping", cfg.HA.Cluster)
			break wait
		}
	}
	if jm.kept != nil {
		// Task continuity: the TaskManagers keep the tasks running for the next leader. Their sessions
		// end first, so that no cancellation reaches them, and nothing of the jobs' sinks is settled.
		lg.Info("JobManager stopping: its jobs' tasks keep running for the next leader")
		disp.Close()
		jm.cancel(executor.ErrLeftRunning)
	} else {
		lg.Info("JobManager stopping: cancelling its jobs")
		jm.cancel(nil)
	}
	jm.wg.Wait()
	stopCampaign()
	if hs != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = hs.Shutdown(sctx)
		cancel()
	}
	disp.Close()
	srv.Stop()
	return failed
}

// warnIfExposed warns of a listener that anyone on the network can reach without TLS.
func warnIfExposed(lg *slog.Logger, what string, addr net.Addr, tls bool) {
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsLoopback() && !tls {
		lg.Warn(what+" listens beyond loopback without TLS: anyone who reaches it can register TaskManagers and submit jobs",
			"addr", addr.String())
	}
}

// jobManager is the JobManager's table of jobs: what clients submitted, and their drivers.
type jobManager struct {
	cfg      JobManagerConfig
	registry Jobs
	log      *slog.Logger
	disp     *jobmaster.Dispatcher
	build    protocol.Build
	lead     *leadership
	// kept collects the tasks TaskManagers kept running for the next leader (nil: task continuity off).
	kept   *offers
	ctx    context.Context // cancelled when the JobManager stops: every job is cancelled
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	jobs  map[protocol.JobID]*jmJob
	order []protocol.JobID
}

// maxJobsRemembered bounds the ended jobs the JobManager keeps for the REST API and Watch; older ones are
// forgotten.
const maxJobsRemembered = 100

// jmJob is one submitted job.
type jmJob struct {
	id        protocol.JobID
	name      string
	job       *executor.Job
	submitted time.Time
	stop      context.CancelFunc
	collector *metrics.JobCollector
	// driver is set when the job starts; done is closed when it ended, after result and err are set.
	mu     sync.Mutex
	driver *jobmaster.Driver
	done   chan struct{}
	result *report.JobResult
	err    error
	ended  time.Time
	// resumed, for a job a previous leader ran, says so in its documents.
	resumed *report.ResumeResult
	// throughput is sampled by the job's run while it runs.
	throughput report.Throughput
}

func (j *jmJob) current() *report.JobResult {
	select {
	case <-j.done:
		return j.result
	default:
	}
	j.mu.Lock()
	d := j.driver
	j.mu.Unlock()
	if d == nil {
		return &report.JobResult{Job: j.name, Status: string(jobmaster.StatusCreated), Failovers: []report.FailoverResult{}, Resumed: j.resumed}
	}
	r := report.Of(j.name, d.Snapshot())
	r.Resumed = j.resumed
	return r
}

// Submit implements rpc.JobService: it builds the job from this binary's registry, checks that the client
// built the same, and starts it.
func (jm *jobManager) Submit(ctx context.Context, req rpc.SubmitRequest) (protocol.JobID, error) {
	if err := jm.lead.refuse(ctx); err != nil {
		return protocol.JobID{}, err
	}
	if m := buildinfo.Mismatch("the client", req.Build, "the JobManager", jm.build); m != "" {
		return protocol.JobID{}, fmt.Errorf("%w: %s", rpc.ErrRefused, m)
	}
	l := launchSpec{name: req.Name, args: req.Args, graph: req.Graph, submitted: time.Now()}
	if jm.lead.client != nil {
		// With HA the job is recorded on etcd before it runs, under an id its first run takes too.
		if _, err := cryptorand.Read(l.id[:]); err != nil {
			return protocol.JobID{}, fmt.Errorf("job id: %w", err)
		}
		l.run = l.id
	}
	return jm.launch(l)
}

// launchSpec is a job to run: its registered name, arguments and graph, its id (zero: the run's own),
// and the run. A resumed job is one a JobManager that led before recorded on etcd: it is taken over
// (adopt: its run's tasks kept running) or restarts from its newest retained checkpoint, if its storage
// holds one, under a run id of its own (so that nothing a TaskManager still holds of the previous run is
// taken for it).
type launchSpec struct {
	name      string
	args      []string
	graph     [32]byte
	id, run   protocol.JobID
	submitted time.Time
	resumed   *report.ResumeResult
	adopt     *executor.Takeover
}

// launch builds the registered job l names and runs it.
func (jm *jobManager) launch(l launchSpec) (protocol.JobID, error) {
	ctx, cancel := context.WithCancel(jm.ctx)
	job, err := buildVerified(ctx, jm.registry, l.name, l.args, l.graph)
	if err != nil {
		cancel()
		return protocol.JobID{}, fmt.Errorf("%w: %w", rpc.ErrRefused, err)
	}
	if job.Settings.MiniCluster.Logger == nil {
		job.Settings.MiniCluster.Logger = jm.log
	}
	id, name, args, graph := l.id, l.name, l.args, l.graph
	if l.resumed != nil && l.adopt == nil {
		if rc := &job.Recovery; rc.Checkpointing && rc.Storage != "" && executor.HasRestorable(ctx, rc.Storage) {
			rc.RestoreFrom = rc.Storage
		}
		jm.log.Info("resuming a job the previous leader ran", "job", name, "id", id, "restore_from", job.Recovery.RestoreFrom,
			"fallback", l.resumed.Fallback)
	}
	if id != (protocol.JobID{}) {
		// Recorded before it runs; a resumed job again, under this leader's term.
		rec := ha.Job{ID: id.String(), Run: l.run.String(), Name: name, Args: args, Build: hex.EncodeToString(jm.build.Sum[:]),
			Graph: hex.EncodeToString(graph[:]), Status: string(jobmaster.StatusRunning), Submitted: l.submitted}
		if err := jm.lead.record(ctx, rec); err != nil {
			cancel()
			return protocol.JobID{}, fmt.Errorf("job %q: %w", name, err)
		}
	}
	j := &jmJob{id: id, name: name, job: job, submitted: l.submitted, stop: cancel, done: make(chan struct{}), resumed: l.resumed}
	started := make(chan *jobmaster.Driver, 1)
	refused := make(chan error, 1)
	jm.wg.Add(1)
	go func() {
		defer jm.wg.Done()
		defer cancel()
		on := executor.On{Dispatcher: jm.disp, Cluster: true, SlotWait: jm.cfg.SlotWaitTimeout, JobID: l.run, Adopt: l.adopt,
			Throughput: &j.throughput}
		if l.resumed != nil && l.adopt == nil {
			on.Resumed = &jobmaster.Resumed{At: l.resumed.At, Reason: l.resumed.Fallback}
		}
		if id != (protocol.JobID{}) {
			// A checkpoint counts as completed only once the term recorded it: a deposed leader's
			// checkpoints fail, so no task commits what a new leader might restore from before.
			on.Committed = func(ctx context.Context, cp int64, loc string) error {
				err := jm.lead.checkpointed(ctx, id, ha.CheckpointPointer{ID: cp, Location: loc, Run: l.run.String()})
				if errors.Is(err, ha.ErrNotLeader) || errors.Is(err, ErrStandby) {
					// The term ended (etcd unreachable for a lease, or another leads): this JobManager
					// stops. Until it has, the checkpoint stays undecided, so that no failure of it fails
					// the job and cancels tasks the next leader takes over.
					select {
					case <-jm.ctx.Done():
					case <-ctx.Done():
					}
				}
				return err
			}
		}
		on.Started = func(d *jobmaster.Driver) {
			if j.id == (protocol.JobID{}) {
				j.id = d.JobID() // before the send: launch reads it after the receive
			}
			j.mu.Lock()
			j.driver = d
			j.mu.Unlock()
			started <- d
		}
		res, err := executor.Run(ctx, job, on)
		if res == nil {
			refused <- err
			return
		}
		res.Resumed = l.resumed
		j.mu.Lock()
		j.result, j.err, j.ended = res, err, time.Now()
		j.mu.Unlock()
		close(j.done)
		jm.log.Info("job ended", "job", name, "id", j.id, "status", res.Status)
		if jm.lead.client != nil && jm.ctx.Err() == nil {
			// Its end, for whoever leads next (a job cancelled because this JobManager stops is left
			// RUNNING there: the next leader resumes it).
			rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
			rec := ha.Job{ID: j.id.String(), Run: l.run.String(), Name: name, Args: args, Build: hex.EncodeToString(jm.build.Sum[:]),
				Graph: hex.EncodeToString(graph[:]), Status: res.Status, Submitted: j.submitted}
			if err := jm.lead.record(rctx, rec); err != nil {
				jm.log.Warn("the job's end could not be recorded on etcd", "job", name, "id", j.id, "err", err)
			}
			rcancel()
		}
	}()
	select {
	case <-started:
	case err := <-refused:
		return protocol.JobID{}, fmt.Errorf("%w: %w", rpc.ErrRefused, err)
	}
	j.collector = metrics.NewJobCollector(j.name, j.current, prometheus.Labels{"job_id": j.id.String()})
	jm.mu.Lock()
	jm.jobs[j.id] = j
	jm.order = append(jm.order, j.id)
	forgotten := jm.forgetOld()
	jm.mu.Unlock()
	jm.lead.forget(forgotten, jm.log)
	jm.log.Info("job submitted", "job", name, "id", j.id, "args", args)
	return j.id, nil
}

// resumed is a job a previous leader recorded as running, built again by the new leader.
type resumed struct {
	rec   ha.Job
	id    protocol.JobID
	run   protocol.JobID // zero: the record names none
	graph [32]byte
	job   *executor.Job
}

// resume starts, once this JobManager leads, the jobs a previous leader recorded as running: with task
// continuity it takes over those whose tasks the TaskManagers kept (takeover.go), and restarts the others
// from their newest retained checkpoint (see launchSpec). A job of another build, or one that cannot be
// built or started, is logged at ERROR and recorded FAILED.
func (jm *jobManager) resume(term *ha.Leadership) {
	ctx, cancel := context.WithTimeout(jm.ctx, 30*time.Second)
	recs, err := jm.lead.client.Jobs(ctx)
	cancel()
	if err != nil {
		jm.log.Error("the jobs the previous leader ran cannot be read from etcd: they are not resumed", "err", err)
		if jm.kept != nil {
			for _, list := range jm.kept.decide(nil, 0, nil) { // nothing is taken over
				jm.dropOffers(list, "the new leader cannot read the jobs from etcd")
			}
		}
		return
	}
	var todo []resumed
	want := map[protocol.JobID]int{}
	for _, rec := range recs {
		if jobmaster.Status(rec.Status).Terminal() {
			continue
		}
		r, err := jm.rebuild(rec)
		if err != nil {
			jm.failRecord(rec, err)
			continue
		}
		if r.run != (protocol.JobID{}) {
			want[r.run] = len(r.job.Graph.Subtasks())
		}
		todo = append(todo, r)
	}
	var offered map[protocol.JobID][]jobmaster.KeptOffer
	if jm.kept != nil {
		offered = jm.kept.decide(want, adoptWait, jm.ctx.Done())
	}
	for _, r := range todo {
		res := &report.ResumeResult{At: time.Now(), PreviousLeader: r.rec.Leader, PreviousEpoch: r.rec.Epoch, Leader: jm.lead.me.Addr, Epoch: term.Epoch()}
		l := launchSpec{name: r.rec.Name, args: r.rec.Args, graph: r.graph, id: r.id, submitted: r.rec.Submitted, resumed: res}
		list := offered[r.run]
		delete(offered, r.run)
		if jm.kept != nil {
			if r.run == (protocol.JobID{}) {
				res.Fallback = "the job's record names no run to take over"
			} else if t, err := jm.takeover(r, list); err != nil {
				res.Fallback = err.Error()
			} else {
				l.run, l.adopt, res.TasksKept = r.run, t, true
				jm.log.Info("taking over a job whose tasks kept running", "job", r.rec.Name, "id", r.id, "taskmanagers", len(list))
				if _, err := jm.launch(l); err == nil {
					continue
				} else {
					jm.disp.Forget(r.run)
					res.Fallback = "the takeover did not start: " + err.Error()
					l.adopt, res.TasksKept = nil, false
				}
			}
			jm.log.Warn("the tasks of a job the previous leader ran are not taken over: it restarts from its latest checkpoint",
				"job", r.rec.Name, "id", r.id, "reason", res.Fallback)
			jm.dropOffers(list, res.Fallback)
		}
		if _, err := cryptorand.Read(l.run[:]); err != nil {
			jm.failRecord(r.rec, err)
			continue
		}
		if _, err := jm.launch(l); err != nil {
			jm.failRecord(r.rec, err)
		}
	}
	for _, list := range offered {
		jm.dropOffers(list, "no job of this JobManager's runs it")
	}
}

// rebuild checks a record of a running job and builds the job again from it.
func (jm *jobManager) rebuild(rec ha.Job) (resumed, error) {
	r := resumed{rec: rec}
	var err error
	if r.id, err = protocol.ParseJobID(rec.ID); err != nil {
		return r, err
	}
	if rec.Run != "" {
		if r.run, err = protocol.ParseJobID(rec.Run); err != nil {
			return r, fmt.Errorf("its record names run %q: %w", rec.Run, err)
		}
	}
	if rec.Build != hex.EncodeToString(jm.build.Sum[:]) {
		return r, fmt.Errorf("it was submitted to a JobManager of another build (%s); this one is %s", rec.Build, jm.build.Describe)
	}
	if b, err := hex.DecodeString(rec.Graph); err != nil || len(b) != len(r.graph) {
		return r, fmt.Errorf("its record holds graph %q, not a fingerprint", rec.Graph)
	} else {
		copy(r.graph[:], b)
	}
	ctx, cancel := context.WithTimeout(jm.ctx, 30*time.Second)
	defer cancel()
	r.job, err = buildVerified(ctx, jm.registry, rec.Name, rec.Args, r.graph)
	return r, err
}

// thisRun is the newest completed checkpoint etcd records for the run of r (0: none of this run). Without
// an answer the job is not taken over: a restart of its tasks could restore older state than its sinks
// committed.
func (jm *jobManager) thisRun(r resumed) (int64, error) {
	ctx, cancel := context.WithTimeout(jm.ctx, 5*time.Second)
	defer cancel()
	cp, err := jm.lead.client.Checkpoint(ctx, r.id.String())
	if err != nil {
		return 0, fmt.Errorf("its newest completed checkpoint cannot be read from etcd: %w", err)
	}
	if cp == nil || cp.Run != r.run.String() {
		return 0, nil
	}
	return cp.ID, nil
}

// failRecord logs that a job the previous leader ran cannot be resumed, and records it FAILED.
func (jm *jobManager) failRecord(rec ha.Job, err error) {
	jm.log.Error("a job the previous leader ran cannot be resumed", "job", rec.Name, "id", rec.ID, "err", err)
	rec.Status = string(jobmaster.StatusFailed)
	rctx, rcancel := context.WithTimeout(jm.ctx, 5*time.Second)
	if err := jm.lead.record(rctx, rec); err != nil {
		jm.log.Warn("recording it FAILED on etcd", "job", rec.Name, "id", rec.ID, "err", err)
	}
	rcancel()
}

// forgetOld drops the oldest ended jobs past maxJobsRemembered, and returns their ids. Called with mu
// held.
func (jm *jobManager) forgetOld() (forgotten []protocol.JobID) {
	for len(jm.order) > maxJobsRemembered {
		id := jm.order[0]
		j := jm.jobs[id]
		select {
		case <-j.done:
		default:
			return forgotten // the oldest still runs: keep it, and those after it
		}
		delete(jm.jobs, id)
		jm.order = jm.order[1:]
		forgotten = append(forgotten, id)
	}
	return forgotten
}

func (jm *jobManager) job(id protocol.JobID) (*jmJob, error) {
	jm.mu.Lock()
	defer jm.mu.Unlock()
	j := jm.jobs[id]
	if j == nil {
		return nil, fmt.Errorf("%w: no job %s on this JobManager", rpc.ErrUnknownJob, id)
	}
	return j, nil
}

// watchInterval is how often Watch sends a running job's status.
const watchInterval = 500 * time.Millisecond

// Watch implements rpc.JobService.
func (jm *jobManager) Watch(ctx context.Context, id protocol.JobID, send func(rpc.JobStatus) error) error {
	j, err := jm.job(id)
	if err != nil {
		return err
	}
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-j.done:
			if jm.lead.client != nil && jm.ctx.Err() != nil {
				// The job ended because this JobManager stops: with HA the next leader resumes it, and
				// a client that follows the leader watches it there.
				return fmt.Errorf("job %s: %w: the JobManager stops, and the next leader resumes the job", id, ErrStandby)
			}
			st := rpc.JobStatus{Final: true}
			if st.ResultJSON, err = json.Marshal(j.result); err != nil {
				return fmt.Errorf("job %s: result: %w", id, err)
			}
			if j.err != nil {
				st.Error = j.err.Error()
			}
			if st.Accumulators, err = j.job.EncodeAccumulators(); err != nil {
				st.Error = errors.Join(j.err, fmt.Errorf("accumulators: %w", err)).Error()
			}
			return send(st)
		case <-t.C:
			b, err := json.Marshal(j.current())
			if err != nil {
				return fmt.Errorf("job %s: result: %w", id, err)
			}
			if err := send(rpc.JobStatus{ResultJSON: b}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Stop implements rpc.JobService.
func (jm *jobManager) Stop(_ context.Context, id protocol.JobID, savepointDir string) error {
	j, err := jm.job(id)
	if err != nil {
		return err
	}
	j.mu.Lock()
	d := j.driver
	j.mu.Unlock()
	if savepointDir != "" && d != nil {
		d.Stop(savepointDir)
		return nil
	}
	j.stop()
	return nil
}

// Leader implements rest.Source.
func (jm *jobManager) Leader(ctx context.Context) (rest.Leader, error) { return jm.lead.status(ctx) }

// Jobs implements rest.Source.
func (jm *jobManager) Jobs(context.Context) ([]rest.JobSummary, error) {
	jm.mu.Lock()
	js := make([]*jmJob, 0, len(jm.order))
	for _, id := range jm.order {
		js = append(js, jm.jobs[id])
	}
	jm.mu.Unlock()
	out := make([]rest.JobSummary, 0, len(js))
	for _, j := range js {
		r := j.current()
		j.mu.Lock()
		ended := j.ended
		j.mu.Unlock()
		s := j.job.Summary()
		s.ID, s.Status, s.Started, s.Ended = j.id.String(), r.Status, j.submitted, ended
		out = append(out, s)
	}
	return out, nil
}

func (jm *jobManager) restJob(id string) (*report.JobResult, error) {
	j, err := jm.restJobOf(id)
	if err != nil {
		return nil, err
	}
	return j.current(), nil
}

// restJobOf is the job of a REST request's id; an error wrapping rest.ErrUnknownJob if there is none.
func (jm *jobManager) restJobOf(id string) (*jmJob, error) {
	jid, err := protocol.ParseJobID(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", rest.ErrUnknownJob, id, err)
	}
	j, err := jm.job(jid)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", rest.ErrUnknownJob, err)
	}
	return j, nil
}

// Job implements rest.Source.
func (jm *jobManager) Job(_ context.Context, id string) (any, error) { return jm.restJob(id) }

// Checkpoints implements rest.Source.
func (jm *jobManager) Checkpoints(_ context.Context, id string) (any, error) {
	r, err := jm.restJob(id)
	if err != nil {
		return nil, err
	}
	return r.CheckpointsDocument(), nil
}

// Failovers implements rest.Source.
func (jm *jobManager) Failovers(_ context.Context, id string) (any, error) {
	r, err := jm.restJob(id)
	if err != nil {
		return nil, err
	}
	return r.FailoversDocument(), nil
}

// Throughput implements rest.Source.
func (jm *jobManager) Throughput(_ context.Context, id string) (any, error) {
	j, err := jm.restJobOf(id)
	if err != nil {
		return nil, err
	}
	return j.throughput.Document(), nil
}

// Exceptions implements rest.Source.
func (jm *jobManager) Exceptions(_ context.Context, id string) (any, error) {
	j, err := jm.restJobOf(id)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	ended := j.ended
	j.mu.Unlock()
	return j.current().ExceptionsDocument(ended), nil
}

// TaskManagers implements rest.Source.
func (jm *jobManager) TaskManagers(context.Context) ([]rest.TaskManager, error) {
	return executor.RESTTaskManagers(jm.disp), nil
}

// metricsHandler serves the Prometheus metrics of the jobs the JobManager remembers (each with a job_id
// label), of its TaskManagers' slots, and of the Go runtime.
func (jm *jobManager) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(clusterCollector{jm}, collectors.NewGoCollector())
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// clusterCollector collects the metrics of every job of a JobManager and of its slot pool. It is an
// unchecked collector (Describe sends nothing): the jobs come and go.
type clusterCollector struct{ jm *jobManager }

var (
	tmDesc        = prometheus.NewDesc("runnel_taskmanagers", "TaskManagers registered with the JobManager.", nil, nil)
	slotsDesc     = prometheus.NewDesc("runnel_slots", "Task slots of the registered TaskManagers.", nil, nil)
	freeSlotsDesc = prometheus.NewDesc("runnel_slots_free", "Task slots no job holds.", nil, nil)
	tmMemoryDesc  = prometheus.NewDesc("runnel_taskmanager_memory_bytes", "Memory a TaskManager's Go runtime holds from the operating system, as its last heartbeat said.", []string{"taskmanager"}, nil)
	tmHeapDesc    = prometheus.NewDesc("runnel_taskmanager_heap_bytes", "The live objects of a TaskManager's Go heap, as its last heartbeat said.", []string{"taskmanager"}, nil)
	departedDesc  = prometheus.NewDesc("runnel_taskmanagers_departed", "TaskManagers lost or left that the JobManager still lists (the last 64).", []string{"state"}, nil)
)

// Describe implements prometheus.Collector.
func (clusterCollector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (c clusterCollector) Collect(ch chan<- prometheus.Metric) {
	tms := c.jm.disp.TaskManagers()
	slots, free := 0, 0
	for _, tm := range tms {
		slots, free = slots+tm.Slots, free+tm.Free
	}
	ch <- prometheus.MustNewConstMetric(tmDesc, prometheus.GaugeValue, float64(len(tms)))
	ch <- prometheus.MustNewConstMetric(slotsDesc, prometheus.GaugeValue, float64(slots))
	ch <- prometheus.MustNewConstMetric(freeSlotsDesc, prometheus.GaugeValue, float64(free))
	newest := map[string]jobmaster.TaskManagerInfo{} // a TaskManager registered again is briefly listed twice
	for _, tm := range tms {
		newest[tm.Name] = tm
	}
	for name, tm := range newest {
		ch <- prometheus.MustNewConstMetric(tmMemoryDesc, prometheus.GaugeValue, float64(tm.MemoryBytes), name)
		ch <- prometheus.MustNewConstMetric(tmHeapDesc, prometheus.GaugeValue, float64(tm.HeapBytes), name)
	}
	departed := map[string]int{jobmaster.TaskManagerLost: 0, jobmaster.TaskManagerLeft: 0}
	for _, tm := range c.jm.disp.Departed() {
		departed[tm.State]++
	}
	for state, n := range departed {
		ch <- prometheus.MustNewConstMetric(departedDesc, prometheus.GaugeValue, float64(n), state)
	}
	c.jm.mu.Lock()
	jobs := make([]*jmJob, 0, len(c.jm.order))
	for _, id := range c.jm.order {
		jobs = append(jobs, c.jm.jobs[id])
	}
	c.jm.mu.Unlock()
	for _, j := range jobs {
		j.collector.Collect(ch)
	}
}
