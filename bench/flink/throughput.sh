#!/usr/bin/env bash
# The throughput pipeline side by side: generator -> map -> keyBy -> running sum -> discarding sink at
# parallelism 2, in Runnel (`runnel bench throughput`, which alternates the engine with its hand-written Go
# baseline) and in Flink 2.3 (the harness's `throughput`, hashmap state, object reuse), the same records and
# keys. ROUNDS rounds alternate which engine goes first; each Flink invocation first runs WARMUP_RECORDS
# records through the same job in the same JVM and discards them. Prints each engine's median and range of
# records/s over the rounds, Runnel / Flink as the ratio of the medians with the range of the per-round
# ratios, and each side's setup.
# Usage: bench/flink/throughput.sh   (from anywhere; Go, Java 17+, Maven, python3)
# Environment: RECORDS (100000000), WARMUP_RECORDS (20000000), ROUNDS (3), OUT (raw JSON lines; default a new
# directory under /tmp, printed).
set -euo pipefail
cd "$(dirname "$0")/../.."

records=${RECORDS:-100000000}
warmup_records=${WARMUP_RECORDS:-20000000}
rounds=${ROUNDS:-3}
out=${OUT:-$(mktemp -d /tmp/runnel-throughput-bench.XXXXXX)}
mkdir -p "$out"
for tool in go java mvn python3; do
	command -v "$tool" >/dev/null || { echo "throughput.sh: $tool not found on PATH" >&2; exit 1; }
done
go build -o "$out/runnel" ./cmd/runnel
mvn -q -B -Dstyle.color=never -f bench/flink package -DskipTests >&2
jar=bench/flink/target/runnel-flink-bench.jar
raw="$out/results.jsonl"
: >"$raw"
echo "throughput.sh: $records records per run, $rounds rounds; raw results in $out" >&2

for round in $(seq "$rounds"); do
	engines=(runnel flink)
	[ $((round % 2)) -eq 0 ] && engines=(flink runnel)
	for e in "${engines[@]}"; do
		if [ "$e" = runnel ]; then
			line=$("$out/runnel" bench throughput --records "$records" --runs 1 --json)
		else
			line=$(java -jar "$jar" throughput --records "$records" --warmup 1 --warmup-records "$warmup_records" --runs 1 \
				2>>"$out/flink.log" | tail -n 1)
		fi
		printf '{"engine":"%s","round":%d,"load":"%s","result":%s}\n' "$e" "$round" "$(cut -d' ' -f1 /proc/loadavg)" \
			"$line" | tee -a "$raw" >&2
	done
done

python3 - "$raw" "$records" "$rounds" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
raw, records, rounds, commit = sys.argv[1:]
rps, loads, setup = {}, [], {}
for line in open(raw):
    d = json.loads(line)
    rps.setdefault(d["engine"], {})[d["round"]] = d["result"]["engine_rps"]
    loads.append(float(d["load"]))
    setup[d["engine"]] = d["result"]
r, f = rps["runnel"], rps["flink"]
per_round = [r[k] / f[k] for k in r if k in f]
med = statistics.median
fl = setup["flink"]
print("throughput, %s records per run, %s rounds alternating, parallelism 2, commit %s, load %.1f–%.1f"
      % (records, rounds, commit, min(loads), max(loads)))
print("Flink: %s, max heap %d MiB, %s, %s state, object reuse %s, warm-up run discarded"
      % (fl["jvm"], fl["heap_max_bytes"] >> 20, fl["gc"], fl["state_backend"], fl["object_reuse"]))
print("Runnel %.1f M/s [%.1f–%.1f], Flink %.1f M/s [%.1f–%.1f]: %.1f× [%.1f–%.1f]" % (
    med(r.values()) / 1e6, min(r.values()) / 1e6, max(r.values()) / 1e6,
    med(f.values()) / 1e6, min(f.values()) / 1e6, max(f.values()) / 1e6,
    med(r.values()) / med(f.values()), min(per_round), max(per_round)))
PY
