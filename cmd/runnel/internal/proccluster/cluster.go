package proccluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"time"

	"github.com/runnel-dev/runnel"
)

// The lines by which the roles say they are ready.
var (
	// Listening is the JobManager's: its RPC address and its REST API's.
	Listening = regexp.MustCompile(`JobManager listening on (\S+) \(REST API https?://(\S+)/v1/jobs\)`)
	// Registered is a TaskManager's, once the JobManager accepted it.
	Registered = regexp.MustCompile(`registered with the JobManager`)
)

// restTimeout bounds one REST request.
const restTimeout = 5 * time.Second

// Spec shapes a cluster.
type Spec struct {
	// TaskManagers is how many TaskManagers start, named tm-1 ... tm-N, with Slots slots each.
	TaskManagers, Slots int
	// JobManagerArgs are added to the JobManager's command line (heartbeat settings, TLS).
	JobManagerArgs []string
	// InOrder starts each TaskManager once the one before registered, so that the slot pool's order
	// follows the names; otherwise they start together.
	InOrder bool
	// StartTimeout bounds how long a process may take to say it is ready.
	StartTimeout time.Duration
	// Process is how every process starts (the binary, the stderr kept); the ready lines are watched.
	Process Options
}

// Cluster is a JobManager and its TaskManagers, each a child process.
type Cluster struct {
	JobManager *Process
	// Addr is the JobManager's RPC address, REST its REST API's (host:port).
	Addr, REST   string
	TaskManagers []*Process

	spec   Spec
	client *http.Client
}

// StartCluster starts the cluster and waits until every TaskManager registered. On an error, what it
// started is stopped before it returns; otherwise the caller Closes the cluster.
func StartCluster(ctx context.Context, spec Spec) (c *Cluster, err error) {
	c = &Cluster{spec: spec, client: &http.Client{Timeout: restTimeout}}
	defer func() {
		if err != nil {
			c.Close(0)
			c = nil
		}
	}()
	opt := spec.Process
	opt.Watch = append(append([]*regexp.Regexp(nil), opt.Watch...), Listening)
	args := append([]string{"jobmanager", "--addr", "127.0.0.1:0", "--rest-addr", "127.0.0.1:0"}, spec.JobManagerArgs...)
	if c.JobManager, err = Start("jobmanager", opt, args...); err != nil {
		return c, err
	}
	m, err := c.JobManager.WaitFor(ctx, Listening, spec.StartTimeout)
	if err != nil {
		return c, err
	}
	c.Addr, c.REST = m[1], m[2]
	for i := range spec.TaskManagers {
		tm, err := c.startTaskManager(fmt.Sprintf("tm-%d", i+1), spec.Slots)
		if err != nil {
			return c, err
		}
		if spec.InOrder {
			if _, err := tm.WaitFor(ctx, Registered, spec.StartTimeout); err != nil {
				return c, err
			}
		}
	}
	for _, tm := range c.TaskManagers {
		if _, err := tm.WaitFor(ctx, Registered, spec.StartTimeout); err != nil {
			return c, err
		}
	}
	return c, nil
}

func (c *Cluster) startTaskManager(name string, slots int, extra ...string) (*Process, error) {
	opt := c.spec.Process
	opt.Watch = append(append([]*regexp.Regexp(nil), opt.Watch...), Registered)
	tm, err := Start(name, opt, append([]string{"taskmanager", "--jobmanager", c.Addr, "--name", name, "--slots", fmt.Sprint(slots)}, extra...)...)
	if err != nil {
		return nil, err
	}
	c.TaskManagers = append(c.TaskManagers, tm)
	return tm, nil
}

// AddTaskManager starts one more TaskManager, with extra arguments, and waits until it registered.
func (c *Cluster) AddTaskManager(ctx context.Context, name string, slots int, extra ...string) (*Process, error) {
	tm, err := c.startTaskManager(name, slots, extra...)
	if err != nil {
		return nil, err
	}
	if _, err := tm.WaitFor(ctx, Registered, c.spec.StartTimeout); err != nil {
		return tm, err
	}
	return tm, nil
}

// TaskManager returns the TaskManager called name, or nil.
func (c *Cluster) TaskManager(name string) *Process {
	for _, tm := range c.TaskManagers {
		if tm.Name == name {
			return tm
		}
	}
	return nil
}

// Close stops every process (SIGTERM together, SIGKILL after grace) and returns once all are reaped. It
// may be called more than once.
func (c *Cluster) Close(grace time.Duration) {
	Stop(grace, append([]*Process{c.JobManager}, c.TaskManagers...)...)
}

// Get decodes the JSON document at a REST path of the JobManager into v.
func (c *Cluster) Get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.REST+path, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decoding: %w", path, err)
	}
	return nil
}

// Placement returns the TaskManager and the attempt of every subtask of a job, keyed "source -> map[1]".
func Placement(doc *runnel.JobResult) (tm map[string]string, attempt map[string]int) {
	tm, attempt = map[string]string{}, map[string]int{}
	for _, v := range doc.Vertices {
		for _, s := range v.Subtasks {
			k := fmt.Sprintf("%s[%d]", v.Name, s.Index)
			tm[k], attempt[k] = s.TaskManager, s.Attempt
		}
	}
	return tm, attempt
}
