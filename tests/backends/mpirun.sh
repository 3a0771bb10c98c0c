#!/usr/bin/env bash
# Launches `mpirun -np N <command...>` the way dtsim's tests need on any machine: allowed as root (CI runs as root),
# more ranks than cores allowed (2-core CI machine, up to 8 ranks), one LibTorch thread per rank.
set -euo pipefail
n="$1"
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
exec mpirun --oversubscribe --bind-to none -np "$n" "$@"
