#!/usr/bin/env bash
# Installs what is missing, builds incrementally, runs every test (GoogleTest, CLI and upstream-oracle tests) via ctest,
# then the sanitizer step (scripts/sanitize.sh: unit tests, fuzz corpora and the bad-input table under ASan + UBSan);
# DTSIM_ASAN=0 skips that step.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build
cd "$DTSIM_BUILD"
# Two tests run at once on 2 cores, and LibTorch's OpenMP threads (which also run a LocalTensor op's ranks at once)
# would spin while they wait, taking the core the other test needs: oracle_ops took 194 s beside oracle_grads with
# spinning threads and 107 s with sleeping ones. Tests measure no time, so they sleep.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
ctest --output-on-failure -j "${DTSIM_JOBS:-2}" "$@"
if [ "${DTSIM_ASAN:-1}" != 0 ]; then
  "$DTSIM_ROOT/scripts/sanitize.sh"
fi
