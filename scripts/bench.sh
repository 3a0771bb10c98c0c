#!/usr/bin/env bash
# Builds dtsim_bench, runs it and upstream's LocalTensorMode (bench/upstream_bench.py) on the same cases in the same
# run, and prints one line per comparison (numbers in docs/performance.md):
#   bench <case> ratio <x>             add/chain/all_gather_vs_upstream: upstream time / dtsim time
#   bench <case>_vs_direct ratio <x>   direct ATen calls on the 8 shards / dtsim time (1.0 = no overhead)
#   bench all_gather ratio <x>         dtsim all_gather's fraction of memcpy bandwidth (memcpy time / dtsim time),
#                                      fresh destination memory for both; all_gather_warm: with reused pages
#   bench all_gather_peak_memory ratio <x>   peak resident memory growth of one all_gather / (inputs + outputs)
#   bench redistribute_<case> ratio <x>      upstream DTensor.redistribute / dtsim's (bench/redistribute_cases.json)
#   bench mpi_overhead_<case> ratio <x>      raw MPI call time / dtsim's MPI collective, 8 ranks x 16 MiB (mpirun)
# dtsim-vs-direct and dtsim-vs-memcpy are paired measurements (alternating batches, best batch of each), which keeps
# the ratios stable on a shared machine. Uses the project venv (.venv); set DTSIM_PY for another torch 2.13 Python.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build --target dtsim_bench dtsim_redistribute_bench >&2
if [ -f "$DTSIM_BUILD/build.ninja" ] && ninja -C "$DTSIM_BUILD" -t targets all 2>/dev/null | grep -q '^dtsim_mpi_bench:'; then
  configure_and_build --target dtsim_mpi_bench >&2
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
bench="$DTSIM_BUILD/bench/dtsim_bench"
"$bench" --benchmark_filter='BM_Paired' --benchmark_out="$out/paired.json" --benchmark_out_format=json >&2
# Peak memory in a process of its own, so nothing freed earlier is counted.
"$bench" --benchmark_filter='BM_AllGatherPeakMemory' --benchmark_out="$out/peak.json" --benchmark_out_format=json >&2
# Steady state: glibc keeps freed memory (no mmap for large blocks, no trimming), so pages are reused by both sides.
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
  "$bench" --benchmark_filter='BM_PairedAllGather' --benchmark_out="$out/warm.json" --benchmark_out_format=json >&2
"$DTSIM_PY" "$DTSIM_ROOT/bench/upstream_bench.py" > "$out/upstream.json"
# DTensor redistribute on the cases of bench/redistribute_cases.json, dtsim and upstream, twice: with the default
# allocator, and with c10's transparent-huge-page allocation (THP_MEM_ALLOC_ENABLE=1, what the dtsim command line
# uses) for both sides — the large cases are bound by first-touch page faults on their fresh outputs.
for thp in 0 1; do
  THP_MEM_ALLOC_ENABLE=$thp "$DTSIM_BUILD/bench/dtsim_redistribute_bench" --benchmark_repetitions=3 \
    --benchmark_out="$out/redistribute_thp$thp.json" --benchmark_out_format=json >&2
  THP_MEM_ALLOC_ENABLE=$thp "$DTSIM_PY" "$DTSIM_ROOT/bench/upstream_redistribute_bench.py" \
    > "$out/upstream_redistribute_thp$thp.json"
done
# The MPI backend's overhead over the raw MPI calls, 8 ranks x 16 MiB (all ranks on this machine).
if [ -x "$DTSIM_BUILD/bench/dtsim_mpi_bench" ]; then
  "$DTSIM_ROOT/tests/backends/mpirun.sh" 8 "$DTSIM_BUILD/bench/dtsim_mpi_bench" 15 > "$out/mpi.json"
fi
"$DTSIM_PY" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]

def load(name):
    return {b["name"].split("/")[0]: b for b in json.load(open(os.path.join(out, name)))["benchmarks"]}

paired, warm, peak = load("paired.json"), load("warm.json"), load("peak.json")
up = json.load(open(os.path.join(out, "upstream.json")))
for case, name in (("add", "BM_PairedAdd"), ("chain", "BM_PairedChain")):
    b = paired[name]
    print(f"bench {case} ratio {up[case + '_us'] / b['b_us']:.1f}   "
          f"(upstream {up[case + '_us']:.1f} us, dtsim {b['b_us']:.2f} us)")
    print(f"bench {case}_vs_direct ratio {b['a_us'] / b['b_us']:.3f}   "
          f"(direct {b['a_us']:.2f} us, dtsim {b['b_us']:.2f} us)")
ag = paired["BM_PairedAllGather"]
print(f"bench all_gather ratio {ag['a_us'] / ag['b_us']:.3f}   (fresh destination pages: dtsim {ag['b_us'] / 1e3:.1f} ms "
      f"vs memcpy {ag['a_us'] / 1e3:.1f} ms; 8 ranks x 16 MiB, 1 GiB written)")
agw = warm["BM_PairedAllGather"]
print(f"bench all_gather_warm ratio {agw['a_us'] / agw['b_us']:.3f}   (reused pages: dtsim {agw['b_us'] / 1e3:.1f} ms "
      f"vs memcpy {agw['a_us'] / 1e3:.1f} ms)")
print(f"bench all_gather_vs_upstream ratio {up['all_gather_us'] / ag['b_us']:.1f}   (upstream LocalTensorMode "
      f"{up['all_gather_us'] / 1e3:.0f} ms, dtsim {ag['b_us'] / 1e3:.1f} ms)")
for thp in (0, 1):
    red = {}
    for b in json.load(open(os.path.join(out, f"redistribute_thp{thp}.json")))["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b["name"]).split("/")[1]
        t = b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]
        red[name] = min(red.get(name, t), t)
    up_red = json.load(open(os.path.join(out, f"upstream_redistribute_thp{thp}.json")))
    suffix = "_thp" if thp else ""
    for name, t in red.items():
        if name in up_red:
            print(f"bench redistribute_{name}{suffix} ratio {up_red[name] / t:.1f}   (upstream {up_red[name]:.1f} us, "
                  f"dtsim {t:.1f} us{', both with THP_MEM_ALLOC_ENABLE=1' if thp else ''})")
if os.path.exists(os.path.join(out, "mpi.json")):
    mpi = json.load(open(os.path.join(out, "mpi.json")))
    for case in ("all_gather", "all_reduce"):
        m = mpi[case]
        print(f"bench mpi_overhead_{case} ratio {m['raw_us'] / m['dtsim_us']:.3f}   (raw MPI {m['raw_us'] / 1e3:.1f} ms, "
              f"dtsim {m['dtsim_us'] / 1e3:.1f} ms; {mpi['ranks']} ranks x {mpi['bytes_per_rank'] >> 20} MiB, best of 15)")
print(f"bench all_gather_peak_memory ratio {peak['BM_AllGatherPeakMemory']['peak_over_in_out']:.3f}   "
      f"(peak RSS growth / (inputs + outputs))")
PY
