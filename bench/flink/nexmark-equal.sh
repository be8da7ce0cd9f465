#!/usr/bin/env bash
# Nexmark in Runnel and in Flink 2.3 on the same input file: every query's results must be equal
# (examples/nexmark TestNexmarkEqualsFlink). Builds the Flink harness first.
# Usage: bench/flink/nexmark-equal.sh (from anywhere; Java 17+ and Maven needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
mvn -q -f bench/flink package -DskipTests
RUNNEL_FLINK_JAR="$PWD/bench/flink/target/runnel-flink-bench.jar" go test -count=1 -v -run 'TestNexmarkEqualsFlink|TestGeneratorEqualsJava' ./examples/nexmark/ | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|differs|lines, the reference'
