package roles

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/runnel-dev/runnel/internal/ha"
	"github.com/runnel-dev/runnel/internal/protocol"
	"github.com/runnel-dev/runnel/internal/rest"
)

// ErrStandby is what a standby JobManager's refusals wrap: it runs no jobs and takes no TaskManagers
// while another leads.
var ErrStandby = errors.New("this JobManager stands by")

// leadership is a JobManager's view of who leads its cluster. Without HA it leads alone; with HA it
// leads from the moment its campaign wins until its term ends.
type leadership struct {
	client *ha.Client // nil without HA
	me     ha.Candidate

	mu   sync.Mutex
	term *ha.Leadership // nil while it stands by
}

// refuse returns nil when this JobManager leads, else an error wrapping ErrStandby that names the leader.
func (l *leadership) refuse(ctx context.Context) error {
	if l.client == nil {
		return nil
	}
	l.mu.Lock()
	leading := l.term != nil
	l.mu.Unlock()
	if leading {
		return nil
	}
	cluster := l.client.Config().Cluster
	info, err := l.client.Leader(ctx)
	switch {
	case errors.Is(err, ha.ErrNoLeader):
		return fmt.Errorf("%w: no JobManager of cluster %q leads now; try again in a few seconds", ErrStandby, cluster)
	case err != nil:
		return fmt.Errorf("%w: %w", ErrStandby, err)
	}
	return fmt.Errorf("%w: the JobManager at %s leads cluster %q", ErrStandby, info.Addr, cluster)
}

// epoch is the epoch of the term this JobManager leads in (0: none, or without HA).
func (l *leadership) epoch() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term == nil {
		return 0
	}
	return l.term.Epoch()
}

// record writes rec to etcd under the term: an error unless this JobManager leads.
func (l *leadership) record(ctx context.Context, rec ha.Job) error {
	l.mu.Lock()
	term := l.term
	l.mu.Unlock()
	if term == nil {
		return fmt.Errorf("%w: the job cannot be recorded on etcd", ErrStandby)
	}
	return term.PutJob(ctx, rec)
}

// checkpointed records cp as job id's newest completed checkpoint under the term: an error unless this
// JobManager leads.
func (l *leadership) checkpointed(ctx context.Context, id protocol.JobID, cp ha.CheckpointPointer) error {
	l.mu.Lock()
	term := l.term
	l.mu.Unlock()
	if term == nil {
		return fmt.Errorf("%w: checkpoint %d cannot be recorded on etcd", ErrStandby, cp.ID)
	}
	return term.PutCheckpoint(ctx, id.String(), cp)
}

// forget deletes the records of jobs the JobManager no longer remembers (best effort: a record left is
// an ended job's, which no leader resumes).
func (l *leadership) forget(ids []protocol.JobID, lg *slog.Logger) {
	l.mu.Lock()
	term := l.term
	l.mu.Unlock()
	if term == nil {
		return
	}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := term.DeleteJob(ctx, id.String()); err != nil {
			lg.Warn("an ended job's record could not be deleted from etcd", "id", id, "err", err)
		}
		cancel()
	}
}

// status implements rest.Source's Leader.
func (l *leadership) status(ctx context.Context) (rest.Leader, error) {
	if l.client == nil {
		return rest.Leader{Leading: true, Addr: l.me.Addr, REST: l.me.REST}, nil
	}
	st := rest.Leader{HA: true, Cluster: l.client.Config().Cluster}
	l.mu.Lock()
	term := l.term
	l.mu.Unlock()
	if term != nil {
		st.Leading, st.Addr, st.REST, st.Epoch = true, l.me.Addr, l.me.REST, term.Epoch()
		return st, nil
	}
	info, err := l.client.Leader(ctx)
	if errors.Is(err, ha.ErrNoLeader) {
		return st, nil
	}
	if err != nil {
		return rest.Leader{}, err
	}
	st.Addr, st.REST, st.Epoch = info.Addr, info.REST, info.Epoch
	return st, nil
}

// campaign runs the campaign on a goroutine that stop (which the caller must call) ends and waits for:
// won gets the term once this JobManager leads; failed gets the campaign's error. stop resigns a term
// it won, so that a standby takes over at once.
func (l *leadership) campaign(lg *slog.Logger) (won <-chan *ha.Leadership, failed <-chan error, stop func()) {
	w, f := make(chan *ha.Leadership, 1), make(chan error, 1)
	if l.client == nil {
		return w, f, func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	cluster := l.client.Config().Cluster
	lg.Info("JobManager standing by: campaigning for the leadership", "cluster", cluster, "addr", l.me.Addr)
	go func() {
		defer close(done)
		term, err := l.client.Campaign(ctx, l.me)
		if err != nil {
			if ctx.Err() == nil {
				f <- err
			}
			return
		}
		l.mu.Lock()
		l.term = term
		l.mu.Unlock()
		lg.Info("JobManager leads", "cluster", cluster, "epoch", term.Epoch())
		w <- term
	}()
	return w, f, func() {
		cancel()
		<-done
		l.mu.Lock()
		term := l.term
		l.term = nil
		l.mu.Unlock()
		if term != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = term.Resign(rctx)
			rcancel()
		}
	}
}

// advertised returns the address others reach a listener at: adv when given, else where it listens,
// which must then name a host (with HA, an address on every interface says nothing to another process).
func advertised(adv string, ln net.Addr, what, flag string) (string, error) {
	if adv != "" {
		return adv, nil
	}
	ta, ok := ln.(*net.TCPAddr)
	if ok && ta.IP.IsUnspecified() {
		return "", fmt.Errorf("the %s listens on every interface (%s): with --ha, give %s HOST:PORT, the address the other processes reach it at", what, ln, flag)
	}
	return ln.String(), nil
}
