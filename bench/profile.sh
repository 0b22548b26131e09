#!/usr/bin/env bash
# Profiles one benchmark of bench/ (by default case 1, ours: fencing on,
# defaults) and writes the CPU profile's cumulative top and the allocation
# sites (every allocation counted) to bench/results/profile-<UTC time>.txt,
# the summary docs/benchmarks.md quotes under "What a client pays".
#
#   bench/profile.sh                               # C1 ours, 10000 + 3000 operations
#   BENCH='C1Uncontended/^ours-nofence$' bench/profile.sh
#   CPU_N=20000x MEM_N=5000x bench/profile.sh
#
# Needs Go and redis-server on PATH (the benchmark starts its own servers).
# The raw profiles and the test binary stay in a temporary directory, named
# in the output, for `go tool pprof -list` or -peek afterwards.
set -euo pipefail
cd "$(dirname "$0")"

BENCH="${BENCH:-C1Uncontended/^ours\$}"
CPU_N="${CPU_N:-10000x}"
MEM_N="${MEM_N:-3000x}"
command -v redis-server >/dev/null || { echo "redis-server not on PATH (apt-get install redis-server)" >&2; exit 1; }

mkdir -p results
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="results/profile-$stamp.txt"
tmp="$(mktemp -d /tmp/redlock-profile-XXXXXX)"

lib="unknown"
if git -C .. rev-parse --git-dir >/dev/null 2>&1; then
  head="$(git -C .. rev-parse --short HEAD)"
  dirty="$(git -C .. --no-optional-locks status --porcelain -- . ':!bench' ':!docs' | wc -l | tr -d ' ')"
  lib="commit $head, $dirty paths changed or untracked outside bench/ and docs/"
fi

{
  echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "# machine: $(nproc) cores; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(go version)"
  echo "# library: $lib"
  echo "# cpu: cd bench && go test -run '^\$' -bench '$BENCH' -benchmem -benchtime=$CPU_N -cpuprofile $tmp/cpu -o $tmp/test ."
  go test -run '^$' -bench "$BENCH" -benchmem -benchtime="$CPU_N" -cpuprofile "$tmp/cpu" -o "$tmp/test" . | grep '^Benchmark'
  echo "# mem: cd bench && go test -run '^\$' -bench '$BENCH' -benchmem -benchtime=$MEM_N -memprofile $tmp/mem -memprofilerate=1 -o $tmp/test ."
  go test -run '^$' -bench "$BENCH" -benchmem -benchtime="$MEM_N" -memprofile "$tmp/mem" -memprofilerate=1 -o "$tmp/test" . | grep '^Benchmark'
  echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "## CPU, cumulative (go tool pprof -top -cum)"
  go tool pprof -top -cum -nodecount=80 "$tmp/test" "$tmp/cpu" 2>/dev/null
  echo
  echo "## Allocations by site (go tool pprof -sample_index=alloc_objects -top)"
  go tool pprof -sample_index=alloc_objects -top -nodecount=40 "$tmp/test" "$tmp/mem" 2>/dev/null
} >"$out"
echo "summary: bench/$out; raw profiles and test binary: $tmp"
