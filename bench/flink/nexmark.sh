#!/usr/bin/env bash
# Nexmark side by side: every query in Runnel (`runnel bench nexmark`) and in Flink 2.3 (the harness's
# `nexmark`, Flink SQL), on the same generated events (the Java port of Runnel's generator: the same events,
# pinned by the golden files), the same event count, the same parallelism (2) and watermark bound, each
# engine into a sink that discards (Runnel's counting sink, Flink's blackhole).
#
# Method. ROUNDS rounds; in each round every query runs once in each engine, the engines alternating which
# goes first (Runnel first in odd rounds, Flink in even ones), so that drift of a shared machine falls on
# both. Every invocation is a fresh process that first runs WARMUP_EVENTS events through the same query and
# discards the result (the JVM's JIT and class loading, both heaps sized), then measures one run of EVENTS
# events: events/s = events ÷ the run's time (Runnel: first poll of a source to the last result; Flink:
# the job's net runtime, deployment included). Each round also measures each generator alone at the same
# parallelism, no engine (`runnel bench nexmark --limit`, the harness's `nexmark-limit`), LIMIT_RUNS times:
# the best single run is the limit no query over it can pass. The summary gives, per query, the median and
# range over the rounds of each engine, Runnel / Flink as the ratio of the medians with the range of the per-round ratios, and each
# engine's median as a fraction of its own generator's limit; the setup of each side (parallelism, heap,
# collector, state backend, object reuse, Go and JVM versions) and the machine's load are printed with it.
#
# Flink runs each query under each of FLINK_TUNINGS, one after the other in its turn: "nexmark", the Nexmark
# suite's own table options (mini-batch aggregation, split distinct aggregation), and "none", Flink's
# defaults. Neither is better on every query on this machine, so Flink's figure for a query is the tuning
# with the better median, named in the table, with the other's median beside it.
#
# Usage: bench/flink/nexmark.sh [QUERY...]   (default: every query of `runnel bench nexmark`; from anywhere;
#                                            Go, Java 17+, Maven, python3)
# Environment: EVENTS (10000000), WARMUP_EVENTS (2000000), ROUNDS (3), LIMIT_RUNS (5: runs of each generator
# alone per round; a run takes about a second), FLINK_TUNINGS ("nexmark none"), CHECKPOINT_INTERVAL (0: none; e.g.
# 1s for both engines), OUT (a directory for the raw JSON lines and Flink's logs; default a new one under
# /tmp, printed).
set -euo pipefail
cd "$(dirname "$0")/../.."

events=${EVENTS:-10000000}
warmup_events=${WARMUP_EVENTS:-2000000}
rounds=${ROUNDS:-3}
limit_runs=${LIMIT_RUNS:-5}
interval=${CHECKPOINT_INTERVAL:-0}
read -r -a tunings <<<"${FLINK_TUNINGS:-nexmark none}"
out=${OUT:-$(mktemp -d /tmp/runnel-nexmark-bench.XXXXXX)}
mkdir -p "$out"
for tool in go java mvn python3; do
	command -v "$tool" >/dev/null || { echo "nexmark.sh: $tool not found on PATH" >&2; exit 1; }
done

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo "+changes") # what is built, before any later commit
go build -o "$out/runnel" ./cmd/runnel
mvn -q -B -Dstyle.color=never -f bench/flink package -DskipTests >&2
jar=bench/flink/target/runnel-flink-bench.jar

queries=("$@")
if [ ${#queries[@]} -eq 0 ]; then
	# The queries Runnel's benchmark knows, as its --query flag lists them.
	read -r -a queries <<<"$("$out/runnel" bench nexmark --help | grep -- '--query' | grep -oE '\bq[0-9]+\b' | tr '\n' ' ')"
fi
raw="$out/results.jsonl"
: >"$raw"
echo "nexmark.sh: ${queries[*]}; $events events per run after $warmup_events warm-up events; $rounds rounds;" \
	"raw results in $out" >&2

# record ENGINE ROUND QUERY JSON: one line of the raw results.
record() {
	printf '{"engine":"%s","round":%d,"query":"%s","load":"%s","result":%s}\n' "$1" "$2" "$3" \
		"$(cut -d' ' -f1 /proc/loadavg)" "$4" | tee -a "$raw" >&2
}

common=(--events "$events" --parallelism 2)
for round in $(seq "$rounds"); do
	engines=(runnel flink)
	[ $((round % 2)) -eq 0 ] && engines=(flink runnel)
	for e in "${engines[@]}"; do
		if [ "$e" = runnel ]; then
			record runnel "$round" limit "$("$out/runnel" bench nexmark --limit --events "$events" --runs "$limit_runs" --warmup 1 \
				--warmup-events "$warmup_events" --json)"
		else
			record flink "$round" limit "$(java -jar "$jar" nexmark-limit "${common[@]}" --runs "$limit_runs" --warmup 1 \
				2>>"$out/flink.log" | tail -n 1)"
		fi
	done
	for q in "${queries[@]}"; do
		for e in "${engines[@]}"; do
			if [ "$e" = runnel ]; then
				record runnel "$round" "$q" "$("$out/runnel" bench nexmark --query "$q" --events "$events" --runs 1 \
					--warmup 1 --warmup-events "$warmup_events" --checkpoint-interval "$interval" --json)"
			else
				for t in "${tunings[@]}"; do
					record flink "$round" "$q" "$(java -jar "$jar" nexmark --query "$q" "${common[@]}" --runs 1 --warmup 1 \
						--warmup-events "$warmup_events" --checkpoint-interval "$interval" --tuning "$t" --json \
						2>>"$out/flink.log" | tail -n 1)"
				done
			fi
		done
	done
done

python3 - "$raw" "$events" "$warmup_events" "$rounds" "$interval" "$commit" <<'PY'
import json, statistics, sys
raw, events, warmup, rounds, interval, commit = sys.argv[1:]
runs = {}  # (engine, query) -> [(round, events/s)]; Flink's engine is "flink/" + its tuning
best = {}  # engine -> the best single run of its generator alone
loads, setup = [], {}
for line in open(raw):
    d = json.loads(line)
    r = d["result"]
    engine = d["engine"]
    if engine == "flink" and d["query"] != "limit":
        engine = "flink/" + r.get("tuning", "nexmark")
    runs.setdefault((engine, d["query"]), []).append((d["round"], r["events_per_s"]))
    if d["query"] == "limit":
        best[d["engine"]] = max(best.get(d["engine"], 0), r.get("events_per_s_max", r["events_per_s"]))
    loads.append(float(d["load"]))
    if d["query"] != "limit":
        setup[d["engine"]] = r
queries = []
for (_, q) in runs:
    if q != "limit" and q not in queries:
        queries.append(q)
queries.sort(key=lambda q: int(q[1:]))

def med(xs):
    return statistics.median(xs)

def fmt(xs):
    return "%.2f M [%.2f–%.2f]" % (med(xs) / 1e6, min(xs) / 1e6, max(xs) / 1e6)

def values(engine, q):
    return [v for _, v in runs.get((engine, q), [])]

rs = setup.get("runnel", {}).get("setup", {})
fl = setup.get("flink", {})
print("Nexmark, Runnel against Flink 2.3: %s events per run after a discarded warm-up of %s in the same process;"
      " %s rounds, engines alternating; parallelism 2; checkpoints %s; commit %s; load average %.1f–%.1f over the runs"
      % (events, warmup, rounds, "every " + interval if interval not in ("0", "0s") else "off", commit, min(loads), max(loads)))
print("Runnel: %s, GOMAXPROCS %s, GOGC %s, GOMEMLIMIT %s, heap budget %s, %s state backend"
      % (rs.get("go_version"), rs.get("gomaxprocs"), rs.get("gogc"), rs.get("gomemlimit"), rs.get("heap_budget", "none"),
         rs.get("state_backend")))
print("Flink:  %s, max heap %d MiB, %s, %s state backend, object reuse %s, SQL planner, blackhole sink"
      % (fl.get("jvm"), fl.get("heap_max_bytes", 0) >> 20, fl.get("gc"), fl.get("state_backend"), fl.get("object_reuse")))
rl, fll = best.get("runnel", 0), best.get("flink", 0)
print("Generator alone, events/s, medians of the rounds' medians [range]: Runnel %s, Java %s; the limit, the best"
      " single run: Runnel %.2f M, Java %.2f M" % (fmt(values("runnel", "limit")), fmt(values("flink", "limit")), rl / 1e6, fll / 1e6))
print()
tunings = sorted({e[len("flink/"):] for (e, _) in runs if e.startswith("flink/")})
print("Flink's tunings: %s; per query the one with the better median" % ", ".join(tunings))
print()
print("| query | Runnel events/s | Flink events/s (tuning) | Runnel / Flink | Runnel / its limit | Flink / its limit | Flink, other tunings |")
print("|---|---|---|---|---|---|---|")
for q in queries:
    r = dict(runs.get(("runnel", q), []))
    fs = {t: dict(runs[("flink/" + t, q)]) for t in tunings if ("flink/" + t, q) in runs}
    if not r or not fs:
        continue
    t = max(fs, key=lambda t: med(fs[t].values()))
    f = fs[t]
    per_round = [r[k] / f[k] for k in r if k in f]
    others = ", ".join("%s %.2f M" % (o, med(fs[o].values()) / 1e6) for o in fs if o != t) or "–"
    print("| %s | %s | %s (%s) | **%.1f×** [%.1f–%.1f] | %.2f | %.2f | %s |" % (
        q, fmt(list(r.values())), fmt(list(f.values())), t, med(r.values()) / med(f.values()),
        min(per_round), max(per_round), med(r.values()) / rl, med(f.values()) / fll, others))
PY
