#!/usr/bin/env bash
# Aligned vs unaligned checkpoints behind a slow sink, in Runnel and in Flink 2.3, side by side: the
# same pipeline (generator -> map -> keyBy -> sum -> a sink paced to a fifth of the sources' rate), the
# same rates, keys, parallelism and checkpoint interval. The engines alternate, one round of each at a
# time (each round runs the job aligned and unaligned), and every round prints one JSON line prefixed
# with the engine; a summary of the medians over the rounds follows.
# Usage: bench/flink/checkpoints.sh [ROUNDS]   (default 3; from anywhere; Go, Java 17+, Maven)
# Environment: SINK_RATE (20000 records/s per sink subtask), CHECKPOINTS (5 measured per run),
# DURATION (60s, the longest a run lasts), INTERVAL (1s). Flink's log goes to
# bench/flink/target/logs/checkpoints-*.log.
set -euo pipefail

rounds="${1:-3}"
sink_rate="${SINK_RATE:-20000}"
checkpoints="${CHECKPOINTS:-5}"
duration="${DURATION:-60s}"
interval="${INTERVAL:-1s}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here/../.."
mvn -q -B -Dstyle.color=never -f bench/flink/pom.xml package -DskipTests >&2
mkdir -p bench/flink/target/logs
go build -o bench/flink/target/runnel ./cmd/runnel

common=(--sink-rate "$sink_rate" --checkpoints "$checkpoints" --duration "$duration" --interval "$interval" --runs 1 --warmup 1)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for ((i = 0; i < rounds; i++)); do
    # Alternate which engine goes first, as each engine alternates its two modes.
    engines=(runnel flink)
    if ((i % 2 == 1)); then engines=(flink runnel); fi
    for e in "${engines[@]}"; do
        if [[ $e == runnel ]]; then
            line="$(bench/flink/target/runnel bench checkpoints --backpressure --json "${common[@]}")"
        else
            line="$(java -jar bench/flink/target/runnel-flink-bench.jar checkpoints "${common[@]}" \
                2>"bench/flink/target/logs/checkpoints-$i.log" | tail -n 1)"
        fi
        printf '%s %s\n' "$e" "$line" | tee -a "$out"
    done
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    engine, doc = line.split(" ", 1)
    rows.setdefault(engine, []).append(json.loads(doc))
fields = ["aligned_checkpoint_ms", "unaligned_checkpoint_ms", "ratio", "aligned_state_bytes", "unaligned_state_bytes",
          "unaligned_channel_state_bytes", "aligned_sink_rps", "unaligned_sink_rps"]
print("%-30s %14s %14s" % ("median over rounds", "runnel", "flink-2.3.0"))
for f in fields:
    vals = []
    for e in ("runnel", "flink"):
        xs = [r[f] for r in rows.get(e, []) if f in r]
        vals.append("%14.1f" % statistics.median(xs) if xs else "%14s" % "-")
    print("%-30s %s %s" % (f, vals[0], vals[1]))
PY
