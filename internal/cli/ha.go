package cli

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/runnel-dev/runnel/internal/ha"
)

// AddHAFlags adds the flags of high availability on etcd to fs: --ha and --ha-cluster, and for a
// JobManager (jobManager) --ha-ttl. The function it returns gives the configuration once fs is parsed
// (nil without --ha), or the mistake, naming the flag.
func AddHAFlags(fs *pflag.FlagSet, jobManager bool) func() (*ha.Config, error) {
	var addr, cluster string
	var ttl time.Duration
	fs.StringVar(&addr, "ha", "", "high availability on etcd: etcd://HOST:PORT[,HOST:PORT...]; the JobManager that leads --ha-cluster is found there (in place of --jobmanager)")
	fs.StringVar(&cluster, "ha-cluster", "", "the cluster's name on etcd, the same for all its processes (with --ha)")
	if jobManager {
		fs.DurationVar(&ttl, "ha-ttl", ha.DefaultTTL, "the leader's lease: a standby takes over this long after the leader is lost (whole seconds; etcd raises it to its minimum, 2 s by default)")
	}
	return func() (*ha.Config, error) {
		if addr == "" {
			if cluster != "" {
				return nil, fmt.Errorf("--ha-cluster %q without --ha", cluster)
			}
			return nil, nil
		}
		eps, err := ha.ParseAddress(addr)
		if err != nil {
			return nil, fmt.Errorf("invalid --ha: %w", err)
		}
		cfg := &ha.Config{Endpoints: eps, Cluster: cluster, TTL: ttl}
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("invalid --ha/--ha-cluster/--ha-ttl: %w", err)
		}
		return cfg, nil
	}
}
