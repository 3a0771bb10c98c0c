#!/usr/bin/env bash
# Builds dtsim_bench, runs it and upstream's LocalTensorMode (bench/upstream_bench.py) on the same cases in the same
# run, and prints one line per comparison (numbers in docs/performance.md):
#   bench <case> ratio <x>             add/chain: upstream time / dtsim time; all_gather: dtsim's fraction of memcpy
#   bench <case>_vs_direct ratio <x>   direct ATen calls on the shards / dtsim time (1.0 = no overhead)
#   bench all_gather_peak_memory ratio <x>   peak resident memory of one all_gather / (inputs + outputs)
# Uses the project venv (.venv); set DTSIM_PY to use another interpreter with torch 2.13.
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
configure_and_build --target dtsim_bench >&2
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
bench="$DTSIM_BUILD/bench/dtsim_bench"
# The machine is shared (2 cores): repetitions are interleaved and the best repetition of each case is used.
"$bench" --benchmark_filter='Add|Chain' --benchmark_repetitions=10 --benchmark_enable_random_interleaving=true \
  --benchmark_out="$out/ops.json" --benchmark_out_format=json >&2
"$bench" --benchmark_filter='BM_LocalAllGather|Memcpy' --benchmark_repetitions=3 \
  --benchmark_out="$out/gather.json" --benchmark_out_format=json >&2
# Peak memory in a process of its own, so nothing freed earlier is counted.
"$bench" --benchmark_filter='BM_AllGatherPeakMemory' --benchmark_out="$out/peak.json" --benchmark_out_format=json >&2
# Steady state: glibc keeps freed memory (no mmap for large blocks, no trimming), so the output pages are reused.
GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
  "$bench" --benchmark_filter='BM_LocalAllGather' --benchmark_min_time=2 --benchmark_repetitions=3 \
  --benchmark_out="$out/warm.json" --benchmark_out_format=json >&2
"$DTSIM_PY" "$DTSIM_ROOT/bench/upstream_bench.py" > "$out/upstream.json"
"$DTSIM_PY" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]

def times(name):
    data = json.load(open(os.path.join(out, name)))
    res = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b.get("run_name", b["name"])
        if name not in res or b["real_time"] < res[name]["real_time"]:
            res[name] = b
    return res

def us(b):
    return b["real_time"] * {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b["time_unit"]]

ops, gather, warm, peaks = times("ops.json"), times("gather.json"), times("warm.json"), times("peak.json")
up = json.load(open(os.path.join(out, "upstream.json")))
for case, local, direct in (("add", "BM_LocalAdd", "BM_DirectAdd"), ("chain", "BM_LocalChain", "BM_DirectChain")):
    print(f"bench {case} ratio {up[case + '_us'] / us(ops[local]):.1f}   "
          f"(upstream {up[case + '_us']:.1f} us, dtsim {us(ops[local]):.2f} us)")
    print(f"bench {case}_vs_direct ratio {us(ops[direct]) / us(ops[local]):.3f}   "
          f"(direct {us(ops[direct]):.2f} us, dtsim {us(ops[local]):.2f} us)")
ag, fresh = gather["BM_LocalAllGather/16/real_time"], gather["BM_MemcpyFreshDst/16/real_time"]
print(f"bench all_gather ratio {us(fresh) / us(ag):.3f}   (fresh output pages: dtsim {us(ag) / 1e3:.1f} ms vs "
      f"memcpy into fresh buffers {us(fresh) / 1e3:.1f} ms; 1 GiB written)")
agw, pre = warm["BM_LocalAllGather/16/real_time"], gather["BM_Memcpy/16/real_time"]
print(f"bench all_gather_warm ratio {us(pre) / us(agw):.3f}   (reused pages: dtsim {us(agw) / 1e3:.1f} ms vs "
      f"memcpy into pre-touched buffers {us(pre) / 1e3:.1f} ms)")
peak = list(peaks.values())[0]
print(f"bench all_gather_peak_memory ratio {peak['peak_over_in_out']:.3f}   (peak RSS growth / (inputs + outputs))")
PY
