package throughput

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/runnel-dev/runnel"
)

// DashboardResult compares the engine with and without its web dashboard served and read.
type DashboardResult struct {
	EngineRPS    float64 `json:"engine_rps"`
	DashboardRPS float64 `json:"dashboard_rps"`
	Ratio        float64 `json:"ratio"`
	// Reads counts the documents the dashboard's reader fetched in the last run with it.
	Reads int64 `json:"dashboard_reads"`
}

// dashboardDocuments are what an open dashboard page reads every second (internal/ui): the job's list,
// its result, throughput, checkpoints, failovers and exceptions, and the TaskManagers.
var dashboardDocuments = []string{"", "/throughput", "/checkpoints", "/failovers", "/exceptions"}

// RunDashboardOverhead runs the standard pipeline without and with the dashboard served (runnel.WithUI)
// and read every second as an open page reads it, alternating, and compares the medians: what the
// dashboard costs the job's throughput.
func RunDashboardOverhead(ctx context.Context, cfg Config) (*DashboardResult, error) {
	if cfg.Parallelism == 0 {
		cfg.Parallelism = 2
	}
	if cfg.Runs <= 0 {
		cfg.Runs = 3
	}
	res := &DashboardResult{}
	var plain, shown []time.Duration
	for i := 0; i < cfg.Runs; i++ {
		c := cfg
		t, _, _, err := runEngine(ctx, c)
		if err != nil {
			return nil, err
		}
		plain = append(plain, t)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("throughput: the dashboard's listener: %w", err)
		}
		c.options = []runnel.Option{runnel.WithUIListener(ln)}
		r := startDashboardReader("http://" + ln.Addr().String())
		t, _, _, err = runEngine(ctx, c)
		res.Reads = r.stop()
		if err != nil {
			return nil, err
		}
		shown = append(shown, t)
	}
	if res.Reads == 0 {
		return nil, fmt.Errorf("throughput: the dashboard's reader read nothing while the job ran")
	}
	res.EngineRPS = float64(cfg.Records) / median(plain).Seconds()
	res.DashboardRPS = float64(cfg.Records) / median(shown).Seconds()
	res.Ratio = res.DashboardRPS / res.EngineRPS
	return res, nil
}

// dashboardReader reads what an open dashboard page reads, every 10 ms until the job is listed and every
// second once it is, until stopped.
type dashboardReader struct {
	done  chan struct{}
	wg    sync.WaitGroup
	reads int64
}

func startDashboardReader(base string) *dashboardReader {
	r := &dashboardReader{done: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(path string, v any) bool {
		resp, err := client.Get(base + path)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			_, _ = io.Copy(io.Discard, resp.Body)
			return false
		}
		r.reads++
		if v == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			return true
		}
		return json.NewDecoder(resp.Body).Decode(v) == nil
	}
	r.wg.Go(func() {
		defer client.CloseIdleConnections()
		wait := 10 * time.Millisecond
		for {
			select {
			case <-r.done:
				return
			case <-time.After(wait):
			}
			var jobs struct{ Jobs []struct{ ID string } }
			if !get("/v1/jobs", &jobs) || len(jobs.Jobs) == 0 {
				continue
			}
			wait = time.Second
			for _, doc := range dashboardDocuments {
				get("/v1/jobs/"+jobs.Jobs[0].ID+doc, nil)
			}
			get("/v1/taskmanagers", nil)
		}
	})
	return r
}

// stop ends the reader and returns how many documents it read.
func (r *dashboardReader) stop() int64 {
	close(r.done)
	r.wg.Wait()
	return r.reads
}
