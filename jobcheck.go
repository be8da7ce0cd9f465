package runnel

import "fmt"

// JobSettings is what a JobChecker is told about the job being submitted.
type JobSettings struct {
	// Name is the name the job is submitted under.
	Name string
	// Checkpoint is the job's checkpoint configuration as given (WithCheckpointing); Interval is 0 when
	// the job takes no periodic checkpoints.
	Checkpoint CheckpointConfig
}

// JobChecker is implemented by a Sink whose needs depend on the job's settings: a transactional sink
// whose transactions must outlive a checkpoint interval, or one that needs checkpoints at all. Execute,
// Submit and the processes of a cluster call CheckJob once per sink that implements it, before anything
// runs, and refuse the job with the error it returns, naming the sink: a mistake is reported at
// submission, not after the first failover.
type JobChecker interface {
	CheckJob(JobSettings) error
}

// checkSinks runs the JobChecker of every sink that has one.
func (e *Environment) checkSinks(name string) error {
	s := JobSettings{Name: name, Checkpoint: e.cfg.Checkpoint}
	for _, c := range e.jobCheckers {
		if err := c.check.CheckJob(s); err != nil {
			return fmt.Errorf("sink %q: %w", c.node.Name, err)
		}
	}
	return nil
}
