#!/usr/bin/env bash
# The main job, no cluster needed: installs what is missing, builds incrementally, then shows dtsim debugging
# layouts and redistributions on the embedded LocalTensor world.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build >/dev/null
DTSIM="$DTSIM_BUILD/dtsim"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

echo "== 1. Where does every rank's shard live? An uneven, nested case: 13 rows over a 4x2 mesh, [S(0), S(0)]."
echo "   (Rank 7 gets no rows; upstream reports its offset as 13, the dim size.)"
step "$DTSIM" layout --mesh 4x2 --names dp,tp --shape 13,6 --placements "S(0),S(0)"

echo
echo "== 2. The TP+FSDP layout: _S(0,2) on dp then S(0) on tp — ranks 0..3 hold row blocks 0,2,1,3."
step "$DTSIM" layout --mesh 2x2 --names dp,tp --shape 8,4 --placements "_S(0,2),S(0)"
