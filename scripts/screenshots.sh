#!/usr/bin/env bash
# Writes the pictures in docs/images/ from the example traces in traces/, so the docs show what the viewer really
# draws: dtsim-viewer screenshots (headless, under xvfb-run on Mesa's software OpenGL), a diff of two traces, a
# 4,096-rank trace, and `dtsim layout --png/--svg` pictures. Run it after changing the viewer; it builds what it needs.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build --target dtsim dtsim-viewer dtsim_make_meta_trace >&2
VIEWER="$DTSIM_BUILD/viewer/dtsim-viewer"
DTSIM="$DTSIM_BUILD/dtsim"
OUT="$DTSIM_ROOT/docs/images"
T="$DTSIM_ROOT/traces"
mkdir -p "$OUT"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

shot() {  # shot NAME ARGS...: one screenshot into docs/images/NAME.png
  local name="$1"
  shift
  xvfb-run -a -s "-screen 0 1280x1024x24" "$VIEWER" "$@" --size 1400x860 --screenshot "$OUT/$name.png"
  echo "wrote docs/images/$name.png" >&2
}

# One trace each: an uneven redistribution mid-way (rank 3 selected: its group in the all_gather is outlined), nested
# shards with an empty shard, strided shards, and Partial values.
shot viewer-uneven "$T/uneven_2x4_S0R_to_RS1.json" --step 2 --select-rank 3
shot viewer-nested "$T/nested_4x2_S0S0_to_S1S1.json" --step initial
# The mouse over a block of the tensor: its owners light up in the mesh and the chart, the tooltip says who holds it.
shot viewer-hover "$T/nested_4x2_S0S0_to_S1S1.json" --step 2 --mouse 900,300
shot viewer-strided "$T/strided_2x2_fsdp_tp.json" --step 1
shot viewer-partial "$T/partial_2x2_Psum_to_S0.json" --step initial --select-rank 2

# Diff mode: the same run with rank 5's shard changed after step 2, as a real run with a faulty all_gather would
# record it (until the real backends write such pairs themselves).
"$DTSIM_PY" - "$T/uneven_2x4_S0R_to_RS1.json" "$work/uneven_rank5.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
for rows in (t["steps"][1]["ranks_after"], t["final"]["ranks"]):
    h = rows[5]["hash"]
    rows[5]["hash"] = h[:-1] + ("0" if h[-1] != "0" else "1")
t["meta"]["argv"] += "  (rank 5's shard changed after step 2)"
json.dump(t, open(sys.argv[2], "w"), indent=1)
PY
shot viewer-diff "$T/uneven_2x4_S0R_to_RS1.json" "$work/uneven_rank5.json"

# A real run against the simulation: `dtsim compare` runs the uneven case on 8 MPI ranks with a wrong offset injected
# on rank 3 and keeps both traces (needs the MPI backend; skipped without it).
if "$DTSIM" compare --np 8 --mesh 2x4 --names dp,tp --shape 5,10 --from "S(0),R" --to "R,S(1)" \
     --inject-fault wrong-offset:3 --keep "$work/pair" >/dev/null 2>&1 || [ -f "$work/pair/real.json" ]; then
  shot viewer-real-pair "$work/pair/sim.json" "$work/pair/real.json" --show-second --select-rank 3
else
  echo "no MPI backend: docs/images/viewer-real-pair.png left as it is" >&2
fi

# Model traces (checked in under tests/viewer/data, their README says how they were made): one run with rank 3's
# values and a module selected, and the simulated run against a real 8-rank MPI run with a fault on rank 2.
MD="$DTSIM_ROOT/tests/viewer/data"
shot viewer-model "$MD/model_fsdp_tp_2x4_sim.json" --select-rank 3 --module layers.0.attention.wq
shot viewer-model-diff "$MD/model_fsdp_tp_2x4_sim.json" "$MD/model_fsdp_tp_2x4_real_fault.json"

# A 4,096-rank 3-D mesh (a metadata-only trace from the planner): 16 slices of 16 x 16.
"$DTSIM_BUILD/viewer/dtsim_make_meta_trace" --mesh 16x16x16 --names pp,dp,tp --shape 64,64,64 \
  --from "S(0),S(1),S(2)" --to "R,S(0),S(1)" "$work/mesh4096.json"
shot viewer-4096 "$work/mesh4096.json" --step 1 --select-rank 1000
# Exploring it: go to rank 1380 by typing its number (Ctrl+G), which selects, centres and zooms to it; the step
# search (Ctrl+F) marks the all_gather steps; the mouse over the rank below it.
shot viewer-goto "$work/mesh4096.json" --step 2 \
  --input "key ctrl+g; type 1380; key Enter; key ctrl+f; type all_gather; move 230,420"

# Pictures of one layout without a window.
"$DTSIM" layout --mesh 4x2 --names dp,tp --shape 13,6 --placements "S(0),S(0)" \
  --png "$OUT/layout-nested.png" --svg "$OUT/layout-nested.svg" >/dev/null
echo "wrote docs/images/layout-nested.png, layout-nested.svg" >&2
