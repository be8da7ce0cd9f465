#!/usr/bin/env bash
# Kafka -> keyBy -> running count per key -> Kafka, Runnel (runnel bench kafka) against Flink 2.3 (the harness's
# kafka job: KafkaSource read_committed, KafkaSink AT_LEAST_ONCE and EXACTLY_ONCE), on one real broker and
# the same input topic: `runnel bench kafka --serve` starts the broker (internal/kafkabroker) and fills the
# input once. Then ROUNDS rounds alternate the engines (Runnel, Flink, Runnel, ...); each invocation runs a
# discarded warm-up (one throughput run per guarantee: the JVM's JIT, the broker's page cache) and one
# measured round: throughput of each guarantee over the whole input, then latency at --rate (at-least-once
# first in odd rounds, exactly-once first in even ones). Prints each
# engine's medians and ranges over the rounds, its exactly-once / at-least-once ratio, and Runnel / Flink.
#
# Usage: bench/flink/kafka.sh   (from anywhere; needs go, java 17+, mvn, jq, and the broker's jars:
#                                 go run ./internal/kafkabroker/cmd/fetch)
# Environment: RECORDS (10000000), ROUNDS (3), PARALLELISM (2), INTERVAL (1s), RATE (20000), LATENCY (10s),
# OUT (a directory for the raw JSON and logs; default a new one under /tmp, printed).
set -euo pipefail
cd "$(dirname "$0")/../.."

records=${RECORDS:-10000000}
rounds=${ROUNDS:-3}
parallelism=${PARALLELISM:-2}
interval=${INTERVAL:-1s}
rate=${RATE:-20000}
latency=${LATENCY:-10s}
out=${OUT:-$(mktemp -d /tmp/runnel-kafka-bench.XXXXXX)}
mkdir -p "$out"
for tool in go java mvn jq; do
	command -v "$tool" >/dev/null || { echo "kafka.sh: $tool not found on PATH" >&2; exit 1; }
done

go build -o "$out/runnel" ./cmd/runnel
mvn -q -B -Dstyle.color=never -f bench/flink package -DskipTests >&2
jar=bench/flink/target/runnel-flink-bench.jar

"$out/runnel" bench kafka --serve --records "$records" --input-topic bench-in >"$out/serve.json" 2>"$out/serve.log" &
serve=$!
trap 'kill "$serve" 2>/dev/null; wait "$serve" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
	[ -s "$out/serve.json" ] && break
	kill -0 "$serve" 2>/dev/null || { echo "kafka.sh: the broker did not start:" >&2; cat "$out/serve.log" >&2; exit 1; }
	sleep 1
done
addr=$(jq -r .bootstrap "$out/serve.json")
echo "broker $addr, input topic bench-in with $records records; raw results in $out" >&2

common=(--bootstrap "$addr" --input-topic bench-in --records "$records" --parallelism "$parallelism"
	--checkpoint-interval "$interval" --rate "$rate" --latency-duration "$latency" --rounds 1)
for round in $(seq "$rounds"); do
	# Odd rounds run at-least-once first, even rounds exactly-once first, in both engines.
	order=()
	[ $((round % 2)) -eq 0 ] && order=(--eos-first=true)
	echo "== round $round: runnel ($(uptime | sed 's/.*load/load/'))" >&2
	"$out/runnel" bench kafka "${common[@]}" ${order[@]+"${order[@]}"} --json >"$out/runnel-$round.json" 2>"$out/runnel-$round.log"
	tail -n 4 "$out/runnel-$round.log" >&2
	echo "== round $round: flink ($(uptime | sed 's/.*load/load/'))" >&2
	java -jar "$jar" kafka "${common[@]}" ${order[@]+"${order[@]}"} >"$out/flink-$round.out" 2>"$out/flink-$round.log"
	tail -n 1 "$out/flink-$round.out" >"$out/flink-$round.json"
	grep '^flink kafka:' "$out/flink-$round.log" | tail -n 4 >&2
done

# Medians and ranges over the rounds of each engine's per-round figures.
jq -rs --arg interval "$interval" '
	def med: sort | if length % 2 == 1 then .[length/2|floor] else (.[length/2-1] + .[length/2]) / 2 end;
	def fig(f): map(f) | "\(med|round) (\(min|round)-\(max|round))";
	def figf(f): map(f) | "\(med*10|round/10) (\(min*10|round/10)-\(max*10|round/10))";
	def eng(e): map(select(.engine | startswith(e)));
	def tp(g): .throughput[] | select(.guarantee == g) | .records_per_s;
	def lat(g; p): .latency[] | select(.guarantee == g) | p;
	(eng("runnel")) as $r | (eng("flink")) as $f |
	"engine  guarantee       records/s median (range)     read_committed latency ms p50 (range) / p99 (range), checkpoints every \($interval)",
	(["runnel", $r], ["flink-2.3", $f] | . as [$name, $runs] |
		("at-least-once", "exactly-once") as $g |
		"\($name)  \($g)  \($runs | fig(tp($g)))   p50 \($runs | figf(lat($g; .p50_ms)))  p99 \($runs | figf(lat($g; .p99_ms)))"),
	"exactly-once / at-least-once (median of the per-round ratios): runnel \($r | map(.ratio_eos_alo) | med * 1000 | round / 1000), flink \($f | map(.ratio_eos_alo) | med * 1000 | round / 1000)",
	"runnel / flink throughput (medians): at-least-once \(([$r[] | tp("at-least-once")] | med) / ([$f[] | tp("at-least-once")] | med) * 100 | round / 100), exactly-once \(([$r[] | tp("exactly-once")] | med) / ([$f[] | tp("exactly-once")] | med) * 100 | round / 100)",
	"load average (1 min) at the end of each run: runnel \($r | map(.load_avg_1m * 10 | round / 10)), flink \($f | map(.load_avg_1m * 10 | round / 10))"
' "$out"/runnel-*.json "$out"/flink-*.json
