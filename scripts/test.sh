#!/usr/bin/env bash
# Installs what is missing, builds incrementally, runs every test (GoogleTest, CLI and upstream-oracle tests) via ctest.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build
cd "$DTSIM_BUILD"
ctest --output-on-failure -j "${DTSIM_JOBS:-2}" "$@"
