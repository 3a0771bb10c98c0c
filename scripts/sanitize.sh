#!/usr/bin/env bash
# The sanitizer step of scripts/test.sh (docs/reliability.md): builds build-asan (clang-14, AddressSanitizer +
# UndefinedBehaviorSanitizer with -fno-sanitize-recover=all, libFuzzer instrumentation) and runs, under it, the
# GoogleTest suites (each binary once), every fuzz target over its corpus in tests/fuzz/corpus (seeds and the
# regression inputs of past findings) and the bad-input table against the sanitized dtsim. Any sanitizer report fails.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
fuzz_targets=()
for f in "$DTSIM_ROOT"/tests/fuzz/*_fuzzer.cc; do
  name="$(basename "$f" _fuzzer.cc)"
  fuzz_targets+=("fuzz_$name")
done
configure_and_build_asan --target dtsim dtsim_layout_tests dtsim_core_tests dtsim_ops_tests "${fuzz_targets[@]}"

# LibTorch is built with gcc and not instrumented; see docs/reliability.md for why each option is set.
export ASAN_OPTIONS="detect_leaks=0:detect_odr_violation=0:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

log "sanitizer step: GoogleTest suites"
"$DTSIM_ASAN_BUILD/tests/dtsim_layout_tests" --gtest_brief=1
"$DTSIM_ASAN_BUILD/tests/dtsim_core_tests" --gtest_brief=1
"$DTSIM_ASAN_BUILD/tests/dtsim_ops_tests" --gtest_brief=1
log "sanitizer step: fuzz corpora"
(cd "$DTSIM_ASAN_BUILD" && ctest --output-on-failure -L fuzz -j "${DTSIM_JOBS:-2}")
# The table's rows are independent processes: DTSIM_JOBS pytest processes (tests/pytest_shard.py) run a share each at
# once, their outputs printed one after the other; the step fails if any share does.
shares="${DTSIM_JOBS:-2}"
log "sanitizer step: bad-input table ($shares shares at once)"
share_dir="$(mktemp -d)"
trap 'rm -rf "$share_dir"' EXIT
pids=()
for ((k = 0; k < shares; ++k)); do
  DTSIM_TEST_SHARD="$k/$shares" DTSIM_BIN="$DTSIM_ASAN_BUILD/dtsim" PYTHONDONTWRITEBYTECODE=1 \
    PYTHONPATH="$DTSIM_ROOT/tests${PYTHONPATH:+:$PYTHONPATH}" \
    "$DTSIM_PY" -m pytest -q -p no:cacheprovider -p pytest_shard "$DTSIM_ROOT/tests/cli/test_bad_input.py" \
    >"$share_dir/$k.log" 2>&1 &
  pids+=("$!")
done
failed=0
for ((k = 0; k < shares; ++k)); do
  if ! wait "${pids[$k]}"; then failed=1; fi
  echo "--- bad-input table, share $k of $shares"
  cat "$share_dir/$k.log"
done
exit "$failed"
