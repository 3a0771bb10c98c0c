#!/usr/bin/env bash
# Issue 34's checks on a GPU machine, in one command (docs/real-backends.md, "On a GPU"): run there, in the repository
# root, with the build that scripts/gpu_build.sh packed here into build-gpu/carry (the device tool: carry
# ["build-gpu/carry"], command `scripts/gpu_check.sh`). Prints every check's outcome, the benchmark lines, and a closing
# "gpu_check: N passed, M failed" line; exits 1 when a check failed. Checks:
#   env           the GPU, its driver, torch (must be the version build-gpu was built against), NCCL
#   nccl_suite    the collectives conformance suite on the NCCL backend at world 1 (NCCL refuses two ranks on one
#                 GPU): every collective through NCCL on a communicator of one, with host-staged (CPU) and
#                 device-resident (CUDA) shards
#   nccl_pytest   tests/backends/test_nccl.py: redistributions of 1-rank meshes through NCCL, traces equal to the
#                 simulation's
#   compare_*     `dtsim compare --backend nccl --np 1` on redistributions of every placement kind and several dtypes,
#                 shards on the CPU and on the GPU: "agree"
#   fault_*       each --inject-fault kind on `compare --np 1`: NCCL must end as the MPI backend does (exit code and
#                 verdict; no signal), the MPI backend being the one CI checks against the documented behaviour
#   multi_*       with N > 1 GPUs only (one rank per GPU, not yet run: docs/real-backends.md): the suite at world N,
#                 compare on a 1-D and a 2-D mesh of N ranks on both devices, and each fault on NCCL as on MPI (they
#                 strike there)
#   sim_suite     the conformance suite on the simulated world with every shard on the GPU (worlds 1-8)
#   sim_gpu_*     `dtsim redistribute --device cuda` against the CPU simulation: both verdicts OK and the traces
#                 (every rank's shard hash after every step) equal
#   module        dtsim._C built here for this machine's Python and torch (from the packed static libraries; in the
#                 background while the checks above run)
#   recorder      dtsim.record around an upstream DTensor program on NCCL ranks under torchrun
#                 (tests/python/recorded_nccl_program.py, world 1), and `dtsim replay` of the recording: equal
#   ops_*         the op-level differential: `dtsim record` of an unchanged TP + FSDP2 + AdamW program on NCCL ranks
#                 (tests/python/recorded_nccl_ops_program.py, one rank per GPU), `dtsim run --trace` of it, and
#                 `dtsim trace-diff`: the clean run agrees, a planted transport fault is found at its all-reduce and
#                 rank 0, and the recording's memory samples come from the CUDA allocator
#   bench         bench gpu_simulated_all_gather (d2d copy time / dtsim's all_gather time, 8 ranks x 256 MiB) and
#                 dtsim's GPU redistribute against upstream LocalTensorMode on the same GPU
# DTSIM_GPU_PY names the Python whose torch to use (default python3); DTSIM_GPU_QUICK=1 skips the benchmarks.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARRY="${DTSIM_GPU_CARRY:-$ROOT/build-gpu/carry}"
PY="${DTSIM_GPU_PY:-python3}"
[ -f "$CARRY/env.sh" ] || { echo "gpu_check: no $CARRY/env.sh: run scripts/gpu_build.sh first and carry build-gpu/carry" >&2; exit 2; }
# shellcheck source=/dev/null
source "$CARRY/env.sh"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
failures=()
pass() { passed=$((passed + 1)); echo "check $1: PASS${2:+ — $2}"; }
fail() { failed=$((failed + 1)); failures+=("$1"); echo "check $1: FAIL${2:+ — $2}"; }
# run NAME SECONDS CMD...: runs CMD with a time limit, its output in $work/NAME.out; returns its exit code.
run() {
  local name="$1" limit="$2"
  shift 2
  timeout --kill-after=10 "$limit" "$@" >"$work/$name.out" 2>&1
}
show() { sed 's/^/    /' "$work/$1.out" | tail -n "${2:-15}"; }
# The failures of a GoogleTest run: each failed expectation with its message, then the summary.
show_failures() { grep -E -A4 '(Failure|error:)' "$work/$1.out" | head -n 60 | sed 's/^/    /'; show "$1" 8; }
section() { echo; echo "== $*"; }

section "env"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
echo "build: $(tr '\n' ' ' <"$CARRY/BUILD_INFO")"
"$PY" - >"$work/env.out" 2>&1 <<'PY'
import torch
print(f"torch {torch.__version__}, cuda {torch.version.cuda}, available {torch.cuda.is_available()}, "
      f"devices {torch.cuda.device_count()}, nccl {'.'.join(map(str, torch.cuda.nccl.version()))}, "
      f"device 0: {torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'}")
PY
cat "$work/env.out"
built_torch="$(sed -n 's/^torch //p' "$CARRY/BUILD_INFO")"
if grep -q "^torch $built_torch, .*available True" "$work/env.out"; then
  pass env "torch $built_torch with a GPU"
else
  fail env "the build needs torch $built_torch with a visible GPU"
  echo "gpu_check: $passed passed, $failed failed"
  exit 1
fi

# dtsim._C for this machine's Python and torch, and dtsim._files_c (the output-path policy, no LibTorch) for its Python,
# built in the background (two compiles, about a minute).
ext="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
pyinc="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
torchdir="$("$PY" -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')"
static=()
while read -r l; do static+=("$CARRY/static/libdtsim_$l.a"); done <"$CARRY/static/ORDER"
(run module 900 c++ -std=gnu++17 -O1 -fPIC -shared -fvisibility=hidden -DUSE_C10D_GLOO -DUSE_C10D_NCCL \
  -DUSE_DISTRIBUTED -DUSE_RPC -DUSE_TENSORPIPE -I"$ROOT/include" -I"$CARRY/include" -isystem "$pyinc" \
  -isystem "$torchdir/include" -isystem "$torchdir/include/torch/csrc/api/include" "$ROOT/python/src/module.cc" \
  -o "$work/_C$ext" -Wl,--no-as-needed -lstdc++ -Wl,--start-group "${static[@]}" -Wl,--end-group \
  -L"$torchdir/lib" -ltorch_python -ltorch -ltorch_cpu -lc10 "$CARRY/root/usr/lib/x86_64-linux-gnu/libxxhash.so.0" \
  -Wl,-rpath,"$torchdir/lib" -Wl,-rpath,"$CARRY/root/usr/lib/x86_64-linux-gnu" &&
  run files_module 300 c++ -std=gnu++17 -O1 -fPIC -shared -fvisibility=hidden -I"$ROOT/include" -I"$CARRY/include" \
    -isystem "$pyinc" -isystem "$torchdir/include" "$ROOT/python/src/files_module.cc" -o "$work/_files_c$ext" \
    -Wl,--start-group "${static[@]}" -Wl,--end-group -lstdc++ &&
  # dtsim._watchdog_c (`dtsim run --timeout` for a rank stuck in a C call): optional, dtsim run works without it.
  { run watchdog_module 120 c++ -std=gnu++17 -O1 -fPIC -shared -fvisibility=hidden -isystem "$pyinc" \
      -isystem "$torchdir/include" "$ROOT/python/src/watchdog_module.cc" -o "$work/_watchdog_c$ext" -ldl || true; }) &
module_job=$!

section "NCCL backend, world 1"
run nccl_list 60 dtsim_nccl_tests --gtest_list_tests
device_cases="$(grep -c '_cuda' "$work/nccl_list.out")"
if run nccl_suite 600 mpirun --oversubscribe --bind-to none -np 1 dtsim_nccl_tests --gtest_color=no; then
  pass nccl_suite "$(grep -o '\[  PASSED  \] [0-9]* tests' "$work/nccl_suite.out" | tail -1 | tr -d '[]' | xargs),"\
" $device_cases of them with device-resident shards"
else
  fail nccl_suite
  show_failures nccl_suite
fi
if DTSIM_BIN="$CARRY/bin/dtsim" run nccl_pytest 600 "$PY" -m pytest -q -p no:cacheprovider \
    "$ROOT/tests/backends/test_nccl.py" && grep -q "3 passed" "$work/nccl_pytest.out"; then
  pass nccl_pytest "$(tail -1 "$work/nccl_pytest.out")"
else
  fail nccl_pytest
  show nccl_pytest 30
fi
compare_cases=(
  "1|5,3|S(0)|R|float32"
  "1|7,4|P(sum)|S(1)|float64"
  "1|6|P(max)|R|int64"
  "1|9,2|P(avg)|R|float32"
  "1x1|4,6|S(0),S(1)|S(1),R|bfloat16"
  "1x1x1|3,5,2|R,P(sum),S(2)|S(0),R,R|int32"
)
for device in cpu cuda; do
  i=0
  for c in "${compare_cases[@]}"; do
    IFS='|' read -r mesh shape from to dtype <<<"$c"
    name="compare_${device}_$i"
    i=$((i + 1))
    if run "$name" 300 dtsim compare --backend nccl --np 1 --mesh "$mesh" --shape "$shape" --from "$from" \
        --to "$to" --dtype "$dtype" --device "$device" --timeout 30 && grep -q "^agree" "$work/$name.out"; then
      pass "$name" "$mesh $shape $dtype [$from] -> [$to]: $(grep '^agree' "$work/$name.out")"
    else
      fail "$name" "$mesh $shape $dtype [$from] -> [$to]"
      show "$name"
    fi
  done
done
# A model on one NCCL rank (host-staged shards; loss parallelism's all_reduce on the tp dim of 1 still runs).
if run compare_model 300 dtsim compare --backend nccl --np 1 --timeout 30 -- model --mesh 1 --backward \
    --loss-parallel --dim 64 --heads 4 --layers 1 --vocab 100 --seq 16 --batch 2 &&
    grep -q "^agree" "$work/compare_model.out"; then
  pass compare_model "model --mesh 1 --backward --loss-parallel: $(grep '^agree' "$work/compare_model.out")"
else
  fail compare_model
  show compare_model
fi
# Each fault on NCCL ends as on MPI (same exit code, no signal). check_fault NAME FAULT NP MESH SHAPE FROM TO RULE:
# RULE same-text also wants the same messages but for the backend's name; strikes wants the fault to have struck
# (exit neither 0 nor 5).
check_fault() {
  local name="$1" fault="$2" np="$3" mesh="$4" shape="$5" from="$6" to="$7" rule="$8" backend codes=""
  for backend in mpi nccl; do
    run "${name}_$backend" 120 dtsim compare --backend "$backend" --np "$np" --mesh "$mesh" --shape "$shape" \
      --from "$from" --to "$to" --inject-fault "$fault" --timeout 5
    codes+="$? "
    grep -v "^compare:" "$work/${name}_$backend.out" | sed -E "s/\b$backend\b/BACKEND/g" >"$work/${name}_$backend.norm"
  done
  local mpi_code nccl_code
  read -r mpi_code nccl_code <<<"$codes"
  local ok=0
  if [ "$mpi_code" = "$nccl_code" ] && [ "$nccl_code" -lt 128 ]; then
    case "$rule" in
      same-text) cmp -s "$work/${name}_mpi.norm" "$work/${name}_nccl.norm" && ok=1 ;;
      strikes) [ "$nccl_code" != 0 ] && [ "$nccl_code" != 5 ] && ok=1 ;;
    esac
  fi
  if [ "$ok" = 1 ]; then
    pass "$name" "$fault: exit $nccl_code on both, $(head -1 "$work/${name}_nccl.norm")"
  else
    fail "$name" "$fault: mpi exit $mpi_code, nccl exit $nccl_code"
    show "${name}_mpi"
    show "${name}_nccl"
  fi
}
for f in "wrong-offset:0|1x1|4,6|S(0),S(1)|R,R" "wrong-op:0|1|6,2|P(sum)|R" "drop-rank:0|1|6,2|S(0)|R" \
         "stall-rank:0:2|1|6,2|S(0)|R"; do
  IFS='|' read -r fault mesh shape from to <<<"$f"
  check_fault "fault_${fault%%:*}" "$fault" 1 "$mesh" "$shape" "$from" "$to" same-text
done

gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
if [ "$gpus" -gt 1 ]; then
  section "NCCL backend, world $gpus (one rank per GPU)"
  if run multi_suite 900 mpirun --oversubscribe --bind-to none -np "$gpus" dtsim_nccl_tests --gtest_color=no; then
    pass multi_suite "$(grep -o '\[  PASSED  \] [0-9]* tests' "$work/multi_suite.out" | tail -1 | tr -d '[]' | xargs)"
  else
    fail multi_suite
    show_failures multi_suite
  fi
  meshes=("$gpus")
  [ $((gpus % 2)) -eq 0 ] && meshes+=("2x$((gpus / 2))")
  for mesh in "${meshes[@]}"; do
    case "$mesh" in *x*) from="S(0),P(sum)" to="R,S(1)" ;; *) from="S(0)" to="S(1)" ;; esac
    for device in cpu cuda; do
      name="multi_compare_${mesh}_$device"
      if run "$name" 300 dtsim compare --backend nccl --np "$gpus" --mesh "$mesh" --shape "$((gpus * 3)),$((gpus * 2 + 1))" \
          --from "$from" --to "$to" --device "$device" --timeout 30 && grep -q "^agree" "$work/$name.out"; then
        pass "$name" "$(grep '^agree' "$work/$name.out")"
      else
        fail "$name"
        show "$name"
      fi
    done
  done
  for f in "wrong-offset:1|S(0)|R" "wrong-op:1|P(sum)|R" "drop-rank:1|S(0)|R" "stall-rank:1:60|S(0)|R"; do
    IFS='|' read -r fault from to <<<"$f"
    check_fault "multi_fault_${fault%%:*}" "$fault" "$gpus" "$gpus" "$((gpus * 2)),3" "$from" "$to" strikes
  done
fi

section "the simulated world on the GPU"
if run sim_suite 900 dtsim_core_tests --gtest_filter='Local/CollectivesConformance.*' --gtest_color=no; then
  pass sim_suite "$(grep -o '\[  PASSED  \] [0-9]* tests' "$work/sim_suite.out" | tail -1 | tr -d '[]' | xargs),"\
" $(grep -c '^\[       OK \] .*_cuda' "$work/sim_suite.out") of them with every shard on the GPU"
else
  fail sim_suite
  show_failures sim_suite
fi
sim_cases=(
  "2x4|5,10|S(0),R|R,S(1)|float32"
  "2x4|16,16|S(0),S(1)|S(1),S(0)|float32"
  "2x4|16,16|P(sum),S(0)|R,R|float32"
  "2x4|16,16|P(avg),R|S(1),R|float64"
  "4x2|13,7|S(0),S(0)|S(1),S(1)|int64"
  "8|64,33|P(max)|S(1)|int32"
  "8|100|S(0)|R|bfloat16"
  "2x2x2|6,10,4|S(0),P(sum),S(2)|R,S(1),R|float16"
  "2x2x2|9,9|_S(0,2),S(0),R|R,R,S(1)|float32"
  "3x2|11,5|P(min),S(1)|R,R|int64"
  "8|1024,1024|S(0)|S(1)|float32"
  "2x4|512,256|P(sum),P(sum)|S(0),R|float32"
)
i=0
for c in "${sim_cases[@]}"; do
  IFS='|' read -r mesh shape from to dtype <<<"$c"
  name="sim_gpu_$i"
  i=$((i + 1))
  args=(redistribute --mesh "$mesh" --shape "$shape" --from "$from" --to "$to" --dtype "$dtype")
  run "${name}_cpu" 300 dtsim "${args[@]}" --trace "$work/$name.cpu.json"
  run "${name}_gpu" 300 dtsim "${args[@]}" --device cuda --trace "$work/$name.gpu.json"
  if grep -q "^verdict: OK" "$work/${name}_cpu.out" && grep -q "^verdict: OK" "$work/${name}_gpu.out" &&
      run "${name}_diff" 60 dtsim trace-diff "$work/$name.cpu.json" "$work/$name.gpu.json"; then
    pass "$name" "$mesh $shape $dtype [$from] -> [$to]: $(head -1 "$work/${name}_diff.out")"
  else
    fail "$name" "$mesh $shape $dtype [$from] -> [$to]"
    show "${name}_gpu"
    [ -f "$work/${name}_diff.out" ] && show "${name}_diff"
  fi
done

section "the recorder on an NCCL rank"
if wait "$module_job"; then
  pass module "dtsim._C$ext built for $("$PY" -c 'import sys; print(sys.version.split()[0])')"
  cp "$work/_C$ext" "$work/_files_c$ext" "$CARRY/python/dtsim/"
  [ -f "$work/_watchdog_c$ext" ] && cp "$work/_watchdog_c$ext" "$CARRY/python/dtsim/"
  if PYTHONPATH="$CARRY/python" run record 300 "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 \
        "$ROOT/tests/python/recorded_nccl_program.py" "$work/rec.json" &&
      run replay 120 dtsim replay "$work/rec.json" &&
      grep -q "^verdict: the recorded run's redistributions equal dtsim's simulation" "$work/replay.out"; then
    pass recorder "$(grep '^verdict' "$work/replay.out")"
    show replay 14
  else
    fail recorder
    show record
    [ -f "$work/replay.out" ] && show replay 30
  fi

  # The op-level differential (issue 32): the same unchanged TP + FSDP2 + AdamW program recorded on NCCL ranks (one
  # per GPU) by `dtsim record`, simulated by `dtsim run --trace` on this machine's CPU, and diffed. A clean run must
  # agree (the GPU's kernels round differently from the CPU's: equal or within the dtype's tolerance), a planted
  # transport fault must be found at its collective, its line and rank 0 as "computed", and each rank's memory at its
  # module boundaries must come from the CUDA allocator.
  section "the op-level differential: a real NCCL run against its simulation"
  prog="$ROOT/tests/python/recorded_nccl_ops_program.py"
  ngpu="$("$PY" -c 'import torch; print(torch.cuda.device_count())')"
  launch=("$PY" -m torch.distributed.run --standalone --nproc_per_node "$ngpu" "$prog")
  export DTSIM_PYTHON="$PY"
  if PYTHONPATH="$CARRY/python" run ops_record 300 "$PY" -m dtsim record -o "$work/real.json" -- "${launch[@]}" &&
      PYTHONPATH="$CARRY/python" run ops_sim 300 "$PY" -m dtsim run --nproc-per-node "$ngpu" \
        --trace "$work/sim.json" "$prog"; then
    run ops_diff 120 dtsim trace-diff "$work/real.json" "$work/sim.json"
    diff_rc=$?
    if [ "$diff_rc" = 0 ] && grep -q "^recordings agree" "$work/ops_diff.out"; then
      pass ops_clean "$ngpu NCCL rank(s) against the simulation: $(head -1 "$work/ops_diff.out")"
    else
      fail ops_clean "trace-diff exit $diff_rc"
      show ops_diff 20
    fi
    "$PY" - "$work/real.json" >"$work/ops_memory.out" 2>&1 <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
source, memory = doc["meta"].get("memory_source"), doc.get("memory") or {}
samples = [s for rank in memory.values() for s in rank]
print(f"memory_source {source}; {len(samples)} samples over {len(memory)} rank(s); bytes "
      f"{min((s['bytes'] for s in samples), default=0)}..{max((s['bytes'] for s in samples), default=0)}")
sys.exit(0 if source == "torch.cuda.memory_allocated" and samples and all(s["bytes"] > 0 for s in samples) else 1)
PY
    if [ $? = 0 ]; then pass ops_memory "$(cat "$work/ops_memory.out")"; else fail ops_memory; show ops_memory; fi
  else
    fail ops_clean "the recording or the simulation failed"
    show ops_record
    [ -f "$work/ops_sim.out" ] && show ops_sim
  fi
  if DTSIM_TEST_FAULT=allreduce_corrupt PYTHONPATH="$CARRY/python" run ops_fault_record 300 \
        "$PY" -m dtsim record -o "$work/fault.json" -- "${launch[@]}" && [ -f "$work/sim.json" ]; then
    run ops_fault 120 dtsim trace-diff "$work/fault.json" "$work/sim.json"
    diff_rc=$?
    if [ "$diff_rc" = 1 ] && grep -q "^recordings differ; first at rank 0, event [0-9]*: all_reduce over" \
        "$work/ops_fault.out" && grep -q "^  rank 0, event [0-9]* (computed): all_reduce over .*recorded_nccl_ops_program.py:" \
        "$work/ops_fault.out"; then
      pass ops_fault "$(head -1 "$work/ops_fault.out")"
    else
      fail ops_fault "trace-diff exit $diff_rc"
      show ops_fault 20
    fi
  else
    fail ops_fault "the recording with the planted fault failed"
    show ops_fault_record
  fi
else
  fail module
  show module 30
  [ -f "$work/files_module.out" ] && show files_module 30
fi

if [ "${DTSIM_GPU_QUICK:-0}" != 1 ]; then
  section "benchmarks"
  if run bench_all_gather 600 dtsim_gpu_bench all_gather --ranks 8 --mib 256 --rounds 5; then
    cat "$work/bench_all_gather.out"
  else
    fail bench_all_gather
    show bench_all_gather
  fi
  if run bench_dtsim 600 dtsim_gpu_bench redistribute --ranks 8 --mib 64 --rounds 5 &&
      run bench_upstream 600 "$PY" "$ROOT/bench/upstream_redistribute_bench.py" --gpu 8 64; then
    echo "dtsim on the GPU (best us per call):    $(tail -1 "$work/bench_dtsim.out")"
    echo "upstream LocalTensorMode on the GPU:    $(tail -1 "$work/bench_upstream.out")"
    "$PY" - "$work/bench_dtsim.out" "$work/bench_upstream.out" <<'PY'
import json, sys
dtsim, upstream = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:])
for case in dtsim:
    print(f"bench {case}_vs_upstream ratio {upstream[case] / dtsim[case]:.2f}")
PY
  else
    fail bench_redistribute
    show bench_dtsim
    show bench_upstream
  fi
fi

echo
[ "$failed" -gt 0 ] && echo "failed: ${failures[*]}"
echo "gpu_check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
