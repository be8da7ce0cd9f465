#!/usr/bin/env bash
# Nexmark side by side: for each query, Runnel (runnel bench nexmark, median of 3 runs) then Flink 2.3 (SQL),
# both at parallelism 2 over the same generator; then q5 and q8 with checkpoints every second.
# Usage: bench/flink/nexmark.sh (from the repository root; builds both first).
set -euo pipefail
cd "$(dirname "$0")/../.."
go build -o /tmp/runnel-nexmark-bench ./cmd/runnel
mvn -q -f bench/flink package -DskipTests
jar=bench/flink/target/runnel-flink-bench.jar
for q in q0 q1 q2 q3 q4 q5 q7 q8; do
	echo "== $q"
	/tmp/runnel-nexmark-bench bench nexmark --query "$q" --events 10000000 --runs 3 | tail -1
	java -jar "$jar" nexmark --query "$q" --events 2000000 2>/dev/null | tail -1
done
for q in q5 q8; do
	echo "== $q, checkpoints every 1s"
	/tmp/runnel-nexmark-bench bench nexmark --query "$q" --events 10000000 --runs 3 --checkpoint-interval 1s | tail -1
	java -jar "$jar" nexmark --query "$q" --events 2000000 --checkpoint-interval 1s 2>/dev/null | tail -1
done
