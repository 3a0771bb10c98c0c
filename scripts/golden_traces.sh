#!/usr/bin/env bash
# Regenerates the golden traces in traces/ with the current build (tests/trace_test.cc checks every one of them
# against the global tensor, so a wrong trace cannot slip in through this script).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build --target dtsim >&2
cd "$DTSIM_ROOT"
run() { "$DTSIM_BUILD/dtsim" redistribute "$@" --json >/dev/null; }
run --mesh 4x2 --names dp,tp --shape 13,6 --from "S(0),S(0)" --to "S(1),S(1)" --trace traces/nested_4x2_S0S0_to_S1S1.json
run --mesh 2x2 --names dp,tp --shape 6,5 --from "P(sum),S(1)" --to "S(0),R" --trace traces/partial_2x2_Psum_to_S0.json
run --mesh 2x2 --names dp,tp --shape 8,4 --from "_S(0,2),S(0)" --to "R,S(1)" --trace traces/strided_2x2_fsdp_tp.json
run --mesh 2x4 --names dp,tp --shape 5,10 --from "S(0),R" --to "R,S(1)" --trace traces/uneven_2x4_S0R_to_RS1.json
echo "wrote $(ls traces/*.json | wc -l) traces in traces/" >&2
