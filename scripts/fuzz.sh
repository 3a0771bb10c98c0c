#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz/, libFuzzer + ASan + UBSan, in build-asan) and runs each for SECONDS (default
# 60), one at a time (one process each, no -jobs), starting from the seed and regression corpus in tests/fuzz/corpus/<target> (read
# only) and a working corpus in build-asan/fuzz/<target>/corpus that grows across runs. Prints one line per target
# with the executions and final coverage (cov/ft from libFuzzer's final stats); a finding leaves its input in
# build-asan/fuzz/<target>/ (crash-*, timeout-*, oom-*) and makes the script exit 1.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]          e.g. scripts/fuzz.sh 1800 placements trace
#   DTSIM_FUZZ_RUNS=1000000 scripts/fuzz.sh 1800 placements  stop after 10^6 executions or 30 minutes, what comes first
#   (SECONDS 0: no time limit)
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(placements mesh_options batch_layout batch_plan batch_redistribute batch_op trace trace_diff
                                     trace_semantic redistribute)
configure_and_build_asan --target $(printf "fuzz_%s " "${TARGETS[@]}")

# LibTorch (built with gcc, not instrumented) allocates at static initialisation and never frees: no leak reports;
# its libraries and ours both define some globals: no ODR reports. Everything else aborts on the first error.
export ASAN_OPTIONS="detect_leaks=0:detect_odr_violation=0:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

dict_for() {
  case "$1" in
    placements) echo "$DTSIM_ROOT/tests/fuzz/dicts/placements.dict" ;;
    mesh_options) echo "$DTSIM_ROOT/tests/fuzz/dicts/mesh_options.dict" ;;
    redistribute|trace_semantic) echo "" ;;
    *) echo "$DTSIM_ROOT/tests/fuzz/dicts/json.dict" ;;
  esac
}
max_len_for() {
  case "$1" in
    trace|trace_diff) echo 65536 ;;
    redistribute|trace_semantic) echo 64 ;;
    *) echo 4096 ;;
  esac
}

status=0
for t in "${TARGETS[@]}"; do
  work="$DTSIM_ASAN_BUILD/fuzz/$t"
  mkdir -p "$work/corpus"
  args=(-timeout=25 -rss_limit_mb=4096 -max_len="$(max_len_for "$t")" -print_final_stats=1
        -artifact_prefix="$work/" -close_fd_mask=1)
  dict="$(dict_for "$t")"
  [ -n "$dict" ] && args+=(-dict="$dict")
  [ -n "${DTSIM_FUZZ_RUNS:-}" ] && args+=(-runs="$DTSIM_FUZZ_RUNS")
  [ "$SECONDS_PER_TARGET" -gt 0 ] && args+=(-max_total_time="$SECONDS_PER_TARGET")
  log="$work/last-run.log"
  start=$(date +%s)
  if "$DTSIM_ASAN_BUILD/tests/fuzz/fuzz_$t" "${args[@]}" "$work/corpus" "$DTSIM_ROOT/tests/fuzz/corpus/$t" \
       >"$log" 2>&1; then
    result="ok"
  else
    result="FINDING (see $log and $work/)"
    status=1
  fi
  elapsed=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  echo "fuzz $t: ${execs:-?} executions in ${elapsed}s, ${cov:-no stats}, corpus $(ls "$work/corpus" | wc -l) files: $result"
done
exit $status
