#!/usr/bin/env bash
# Installs what is missing, builds incrementally, runs every test (GoogleTest, CLI and upstream-oracle tests) via ctest,
# then the sanitizer step (scripts/sanitize.sh: unit tests, fuzz corpora and the bad-input table under ASan + UBSan);
# DTSIM_ASAN=0 skips that step (ctest then runs the bad-input table against the Release dtsim, cli_bad_input).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build
# The torchtitan lane (tests/titan/): its own venv with torch 2.15.0 and torchtitan 0.3.0, kept outside the checkout
# and reused where the machine keeps it (scripts/titan_venv.sh).
DTSIM_TITAN_PYTHON="$("$DTSIM_ROOT/scripts/titan_venv.sh")"
export DTSIM_TITAN_PYTHON
cd "$DTSIM_BUILD"
# Two tests run at once on 2 cores, and LibTorch's OpenMP threads (which also run a LocalTensor op's ranks at once)
# would spin while they wait, taking the core the other test needs: oracle_ops took 194 s beside oracle_grads with
# spinning threads and 107 s with sleeping ones. Tests measure no time, so they sleep.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
if [ "${DTSIM_ASAN:-1}" != 0 ]; then
  # The sanitizer step runs the bad-input table (tests/cli/test_bad_input.py) against the sanitized dtsim, every row
  # checked as here and under ASan + UBSan besides, so ctest leaves its Release run (cli_bad_input) out.
  ctest --output-on-failure -j "${DTSIM_JOBS:-2}" -E '^cli_bad_input$' "$@"
  "$DTSIM_ROOT/scripts/sanitize.sh"
else
  ctest --output-on-failure -j "${DTSIM_JOBS:-2}" "$@"
fi
