#!/usr/bin/env bash
# Builds the Flink comparison harness and runs every job once, printing one JSON line per run.
# Flink's own log of each run goes to bench/flink/target/logs/ (standalone-kill: one log per JVM,
# target/logs/standalone-kill-<failover>-hb<interval>-{jm,tm-0,tm-1,tm-2}.log). Takes about 3 minutes,
# most of it the standalone-kill run with Flink's default heartbeats (about 20 s of futile restarts).
# Usage: bench/flink/run.sh            (from anywhere; needs java 17+ and mvn on PATH)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
jar="$here/target/runnel-flink-bench.jar"

command -v mvn >/dev/null || { echo "run.sh: mvn not found on PATH" >&2; exit 1; }
command -v java >/dev/null || { echo "run.sh: java not found on PATH" >&2; exit 1; }

mvn -q -B -Dstyle.color=never -f "$here/pom.xml" package >&2
mkdir -p "$here/target/logs"

status=0
run() {
    local name="$1"
    shift
    local out
    if out="$(java -jar "$jar" "$@" 2>"$here/target/logs/$name.log")"; then
        printf '%s\n' "$out" | tail -n 1
    else
        echo "run.sh: '$*' failed, see $here/target/logs/$name.log" >&2
        tail -n 20 "$here/target/logs/$name.log" >&2
        status=1
    fi
}

run throughput               throughput
run throughput-checkpointed  throughput --checkpoint-interval 1000
run checkpoints              checkpoints --runs 1
run recovery-region          recovery --failover region
run recovery-full            recovery --failover full
run approximate              approximate
run approximate-adaptive     approximate --scheduler adaptive
run standalone-kill-region               standalone-kill --failover region
run standalone-kill-region-hb500         standalone-kill --failover region --heartbeat-interval 500ms --heartbeat-timeout 1500ms
run standalone-kill-approximate          standalone-kill --failover approximate
run standalone-kill-approximate-hb500    standalone-kill --failover approximate --heartbeat-interval 500ms --heartbeat-timeout 1500ms
run jm-kill                              jm-kill
exit "$status"
