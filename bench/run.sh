#!/usr/bin/env bash
# Runs every side-by-side benchmark once (cases 1-9, the round-trip cases)
# and prints
# the tables, the ratios within this run and the targets met or missed.
#
#   bench/run.sh                     # everything, about 2 minutes on 2 cores
#   BENCH='C1|C5' bench/run.sh       # some cases only
#   BENCHTIME=2s bench/run.sh        # longer runs per benchmark
#   NODES=young bench/run.sh         # the nodes young throughout (see below)
#
# Before any case uses them, the nodes are made old: up and marked for the
# longest TTL the bench's clients use (bench_test.go, ageNodes: one wait of
# about 15 s per set of servers), as a production cluster's nodes are once
# it has run for longer than that; the flushes between cases keep each
# node's marker. NODES=young flushes everything (FLUSHALL) and does not
# wait: a cluster's first longest TTL after its nodes start or are
# flushed, when a name's first use waits for every node.
#
# Needs Go and redis-server on PATH. It starts its own redis-server processes
# on free loopback ports (never touching another server, e.g. one on 6379)
# and stops them when done. The raw `go test` output is kept in
# bench/results/run-<UTC time>.txt; the tables are printed and written next
# to it as .md.
set -euo pipefail
cd "$(dirname "$0")"

BENCH="${BENCH:-.}"
BENCHTIME="${BENCHTIME:-1s}"
NODES="${NODES:-old}"
case "$NODES" in
  old | young) ;;
  *) echo "NODES must be old or young, not $NODES" >&2; exit 2 ;;
esac
export REDLOCK_BENCH_NODES="$NODES"
command -v redis-server >/dev/null || { echo "redis-server not on PATH (apt-get install redis-server)" >&2; exit 1; }

mkdir -p results
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
raw="results/run-$stamp.txt"
md="results/run-$stamp.md"

# What was measured: the library is the working tree of the parent module
# (go.work at the repository root). Read-only git queries only.
lib="unknown"
if git -C .. rev-parse --git-dir >/dev/null 2>&1; then
  head="$(git -C .. rev-parse --short HEAD)"
  dirty="$(git -C .. --no-optional-locks status --porcelain -- . ':!bench' ':!docs' | wc -l | tr -d ' ')"
  diffsum="$(git -C .. diff HEAD -- . ':!bench' ':!docs' | sha256sum | cut -c1-12)"
  lib="commit $head, $dirty paths changed or untracked outside bench/ and docs/ (diff sha256 $diffsum)"
fi

cmd=(go test -run '^$' -bench "$BENCH" -benchmem -benchtime="$BENCHTIME" -timeout 30m .)
{
  echo "# command: cd bench && REDLOCK_BENCH_NODES=$NODES go test -run '^\$' -bench '$BENCH' -benchmem -benchtime=$BENCHTIME -timeout 30m ."
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "# machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
  echo "# $(redis-server --version)"
  echo "# $(go version)"
  echo "# library: $lib"
  echo "# load average at start (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$raw"

start=$(date +%s)
set +e
"${cmd[@]}" 2>&1 | tee -a "$raw"
status=${PIPESTATUS[0]}
set -e
end=$(date +%s)
echo "# wall time: $((end - start)) s" >>"$raw"
echo "# load average at end (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg)" >>"$raw"

go run ./cmd/benchtable -node-timeout 100ms <"$raw" | tee "$md"
echo
echo "raw output: bench/$raw; tables: bench/$md; took $((end - start)) s"
exit "$status"
