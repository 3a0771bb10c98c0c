#!/usr/bin/env bash
# Installs what is missing, builds incrementally, runs every test (GoogleTest, CLI and upstream-oracle tests) via ctest,
# then the sanitizer step (scripts/sanitize.sh: unit tests, fuzz corpora and the bad-input table under ASan + UBSan);
# DTSIM_ASAN=0 skips that step.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build
cd "$DTSIM_BUILD"
ctest --output-on-failure -j "${DTSIM_JOBS:-2}" "$@"
if [ "${DTSIM_ASAN:-1}" != 0 ]; then
  "$DTSIM_ROOT/scripts/sanitize.sh"
fi
