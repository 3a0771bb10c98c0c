#!/usr/bin/env bash
# The main job, no cluster needed: installs what is missing, builds incrementally, then debugs layouts and
# redistributions on the embedded LocalTensor world (every rank simulated in this process).
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
# The build's progress goes to stderr (a cold build takes minutes and must not look hung); stdout is the demo.
log "building $DTSIM_BUILD (incremental; a first build takes several minutes)"
configure_and_build >&2
DTSIM="$DTSIM_BUILD/dtsim"
TRACE_DIR="${TMPDIR:-/tmp}/dtsim-demo"
mkdir -p "$TRACE_DIR"

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

echo "== 1. Where does every rank's shard live? 13 rows over a 4x2 mesh with [S(0), S(0)] (nested, uneven):"
echo "   rank 7 gets no rows; upstream reports its offset as 13, the dim size."
step "$DTSIM" layout --mesh 4x2 --names dp,tp --shape 13,6 --placements "S(0),S(0)"

echo
echo "== 2. An uneven redistribution, debugged: 5x10 from [S(0), R] to [R, S(1)] on dp=2 x tp=4."
echo "   The plan, the bytes each rank sends (padded: uneven shards are padded to the torch.chunk size), every"
echo "   rank's shard, and a verdict against the global tensor. The run's trace goes to $TRACE_DIR/uneven.json."
step "$DTSIM" redistribute --mesh 2x4 --names dp,tp --shape 5,10 --from "S(0),R" --to "R,S(1)" --values \
  --trace "$TRACE_DIR/uneven.json"

echo
echo "== 3. Nested shards that must be undone first: [S(0), S(0)] -> [S(1), S(1)] on 4x2 with 13 rows."
echo "   Upstream's greedy plan replicates the inner mesh dim before moving the outer one; min-cost may do better."
step "$DTSIM" plan --mesh 4x2 --names dp,tp --shape 13,6 --from "S(0),S(0)" --to "S(1),S(1)"
step "$DTSIM" plan --mesh 4x2 --names dp,tp --shape 13,6 --from "S(0),S(0)" --to "S(1),S(1)" --planner min-cost
step "$DTSIM" redistribute --mesh 4x2 --names dp,tp --shape 13,6 --from "S(0),S(0)" --to "S(1),S(1)" --json \
  | head -c 600; echo " ..."

echo
echo "== 4. A Partial source: P(sum) over dp, reduce-scattered into S(0). Rank coordinate c on dp holds (1+c)*arange,"
echo "   so the global tensor is 3*arange."
step "$DTSIM" redistribute --mesh 2x2 --names dp,tp --shape 6,4 --from "P(sum),S(1)" --to "S(0),S(1)" --values

echo
echo "== 5. TP + FSDP: shard a TP DTensor on mesh['tp'] further over mesh['dp'] (beyond upstream, pytorch#116101)."
echo "   The result is [_S(0,4), S(0)] on the parent mesh; ranks 0..7 hold rows 0,2,4,6,1,3,5 and nothing."
step "$DTSIM" distribute --mesh 2x4 --names dp,tp --shape 7,3 --step "tp:S(0)" --step "dp:S(0)" --values

echo
echo "== 6. An implicit redistribution: x @ w with x = [S(0), S(1)] (contracting dim sharded over tp) and"
echo "   w = [R, S(1)]. Sharding propagation (upstream's rules and costs) picks the cheapest strategy and moves x."
step "$DTSIM" op mm --mesh 2x4 --names dp,tp --arg "8x16:S(0),S(1)" --arg "16x12:R,S(1)" \
  | grep -v -E '^ +([0-9.]+|inf) us|^  rank'
echo
echo "== 7. A model: a Llama-style transformer with torchtitan's plan (TP + sequence parallelism on tp, FSDP on dp),"
echo "   forward and backward. Per module: collectives with bytes, time and cause, peak memory; then the check"
echo "   against the same model run unsharded (docs/model.md)."
model_cmd=("$DTSIM" model --mesh 2x4 --names dp,tp --plan fsdp+tp --dim 128 --heads 4 --layers 1 --vocab 500 \
  --seq 32 --batch 2 --backward)
printf '\n\033[1m$ %s\033[0m\n' "${model_cmd[*]}"
model_out="$("${model_cmd[@]}")"
printf '%s\n' "$model_out" | head -n 24
echo "   ..."
printf '%s\n' "$model_out" | tail -n 4
echo
echo "== 8. Look instead of reading: the layout inspector. A trace of the nested case of step 3, then screenshots of"
echo "   both demo traces drawn by dtsim-viewer (headless, under xvfb-run), a picture of one layout, and the uneven"
echo "   run as a Perfetto timeline."
"$DTSIM" redistribute --mesh 4x2 --names dp,tp --shape 13,6 --from "S(0),S(0)" --to "S(1),S(1)" \
  --trace "$TRACE_DIR/nested.json" >/dev/null
VIEWER="$DTSIM_BUILD/viewer/dtsim-viewer"
if command -v xvfb-run >/dev/null; then
  step xvfb-run -a "$VIEWER" "$TRACE_DIR/uneven.json" --step 2 --select-rank 3 --screenshot "$TRACE_DIR/uneven.png"
  step xvfb-run -a "$VIEWER" "$TRACE_DIR/nested.json" --step initial --screenshot "$TRACE_DIR/nested.png"
else
  echo "(xvfb-run is missing: no screenshots; scripts/setup.sh installs it)"
fi
step "$DTSIM" layout --mesh 4x2 --names dp,tp --shape 13,6 --placements "S(0),S(0)" --png "$TRACE_DIR/layout.png"
step "$DTSIM" export --format perfetto "$TRACE_DIR/uneven.json" "$TRACE_DIR/uneven.perfetto.json"
echo
echo "== 9. Your own torchrun script, unchanged, on the simulated world: a TP + FSDP2 training script (AdamW, 2x2"
echo "   mesh) launched as torchrun would, then a tensor-parallel tutorial written for GPUs (nccl, cuda) on this CPU"
echo "   machine, a script whose rank 3 all-reduces a tensor of another shape, and --check-ops locating a custom op"
echo "   registered with a wrong sharding strategy (docs/run.md)."
step "$DTSIM" run --nproc-per-node 4 "$DTSIM_ROOT/examples/python/run/tp_fsdp_adamw.py"
step "$DTSIM" run --nproc_per_node 4 --standalone "$DTSIM_ROOT/examples/python/run/gpu_tp_tutorial.py"
step "$DTSIM" run --nproc-per-node 4 "$DTSIM_ROOT/tests/run/scripts/bug_shape.py" || echo "(exit $?: the bug, found)"
DTSIM_PLANT=wrong_strategy step "$DTSIM" run --check-ops --nproc-per-node 4 "$DTSIM_ROOT/tests/run/scripts/sharding_bugs.py" \
  || echo "(exit $?: the op, found)"
echo
echo "Wrote $TRACE_DIR/{uneven,nested,layout}.png and uneven.perfetto.json (open it at https://ui.perfetto.dev)."
echo "Open the viewer on a trace (a desktop session is needed; docs/viewer.md lists every control):"
echo "  $VIEWER $TRACE_DIR/uneven.json"
echo "  $VIEWER $TRACE_DIR/uneven.json other_run.json     # two runs of one redistribution: where they part"
