#!/usr/bin/env bash
# Builds dtsim for a GPU machine on this CPU machine, for scripts/gpu_check.sh to run there (issue 34;
# docs/real-backends.md, "On a GPU"). A GPU machine lent through the device tool has no network and its own torch
# (2.11.0+cu130, CUDA 13, NCCL 2.28), so dtsim is compiled here against that same torch (DTSIM_GPU_TORCH, from PyPI,
# in the venv .venv-gpu) with the CUDA toolkit's runtime headers, and packed into build-gpu/carry/:
#   bin/       wrappers that set the library path (source carry/env.sh there first) and run libexec/
#   libexec/   dtsim, dtsim_core_tests (the conformance suite on the simulated world), dtsim_nccl_tests,
#              dtsim_gpu_bench (stripped)
#   root/      the libraries of this Debian that the GPU machine lacks (Boost.PO, xxHash, stb, OpenMPI and its plugins)
#              and OpenMPI's mpirun/orted, relocated with OPAL_PREFIX
#   env.sh     finds the GPU machine's torch, CUDA and NCCL libraries (its python3) and puts carry/bin on the PATH
#   python/    the dtsim package (a copy) with dtsim._C built here for this machine's Python against that torch;
#              static/ and include/ hold what scripts/gpu_check.sh needs to build dtsim._C there for its Python
# The libraries of torch, CUDA and NCCL are not carried: the GPU machine's own are used (hence the same torch version).
# A smoke run here (the CPU: no GPU visible) checks that the packed binaries load and simulate.
# Then: the device tool's run with carry ["build-gpu/carry"] and the command `scripts/gpu_check.sh`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"  # Debian packages (OpenMPI, Boost, ...), the project venv
GPU_TORCH="${DTSIM_GPU_TORCH:-2.11.0}"
GPU_PY="${DTSIM_GPU_PY:-$DTSIM_ROOT/.venv-gpu/bin/python}"
GPU_BUILD="${DTSIM_GPU_BUILD:-$DTSIM_ROOT/build-gpu}"
CARRY="$GPU_BUILD/carry"
TARGETS=(dtsim dtsim_core_tests dtsim_nccl_tests dtsim_gpu_bench dtsim_python)
PY_LIBS=(core trace backend_local tensor layout)  # dtsim._C's static libraries, in link order

# 1. The GPU machine's torch, here (with its CUDA libraries from PyPI, so the binaries also load on this machine).
if ! "$GPU_PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$GPU_TORCH')" 2>/dev/null; then
  log "creating the venv of the GPU machine's torch: torch==$GPU_TORCH (with its CUDA wheels, about 3 GB)"
  [ -x "$GPU_PY" ] || python3 -m venv "$(dirname "$(dirname "$GPU_PY")")"
  "$GPU_PY" -m pip install -q --disable-pip-version-check "torch==$GPU_TORCH" numpy pytest 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
  "$GPU_PY" -c "import torch" || { log "torch==$GPU_TORCH did not install"; exit 1; }
fi
site="$("$GPU_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"

# 2. Configure and build (NCCL and MPI required; no viewer; dtsim._C beside the build, not in python/dtsim/).
if [ ! -f "$GPU_BUILD/build.ninja" ]; then
  log "configuring $GPU_BUILD against torch $GPU_TORCH (CUDA)"
  cmake -S "$DTSIM_ROOT" -B "$GPU_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$("$GPU_PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DPython3_EXECUTABLE="$GPU_PY" \
    -DCUDA_TOOLKIT_ROOT_DIR="$CUDA_HOME" -DCUDA_NVRTC_LIB="$site/nvidia/cu13/lib/libnvrtc.so.13" \
    -DDTSIM_NCCL_ROOT="$site/nvidia/nccl" -DDTSIM_WITH_NCCL=ON -DDTSIM_WITH_MPI=ON \
    -DDTSIM_BUILD_VIEWER=OFF -DDTSIM_BUILD_PYTHON=ON -DDTSIM_PYTHON_OUTPUT_DIR="$GPU_BUILD/python/dtsim" >/dev/null
fi
log "building ${TARGETS[*]} in $GPU_BUILD"
cmake --build "$GPU_BUILD" -j "${DTSIM_JOBS:-2}" --target "${TARGETS[@]}"

# 3. Pack.
log "packing $CARRY"
rm -rf "$CARRY"
mkdir -p "$CARRY/bin" "$CARRY/libexec" "$CARRY/root/usr/lib/x86_64-linux-gnu" "$CARRY/root/usr/bin" \
  "$CARRY/root/usr/share" "$CARRY/python" "$CARRY/static" "$CARRY/include"
libdir="$CARRY/root/usr/lib/x86_64-linux-gnu"
# The Python package: its sources (no bytecode) and the module built here.
(cd "$DTSIM_ROOT/python" && find dtsim -name '*.py' -o -name '*.pyi' -o -name py.typed) |
  while read -r f; do mkdir -p "$CARRY/python/$(dirname "$f")"; cp "$DTSIM_ROOT/python/$f" "$CARRY/python/$f"; done
cp "$GPU_BUILD"/python/dtsim/_C.*.so "$GPU_BUILD"/python/dtsim/_files_c.*.so "$GPU_BUILD"/python/dtsim/_watchdog_c.*.so \
  "$GPU_BUILD/python/dtsim/_build_info.py" "$CARRY/python/dtsim/"
for l in "${PY_LIBS[@]}"; do cp "$GPU_BUILD/libdtsim_$l.a" "$CARRY/static/"; done
printf '%s\n' "${PY_LIBS[@]}" >"$CARRY/static/ORDER"
cp -r /usr/include/nlohmann "$CARRY/include/"
for t in dtsim tests/dtsim_core_tests tests/dtsim_nccl_tests bench/dtsim_gpu_bench; do
  strip -o "$CARRY/libexec/$(basename "$t")" "$GPU_BUILD/$t"
done
# OpenMPI as Debian lays it out below /usr (OPAL_PREFIX relocates it): libraries and plugins, mpirun, orted, help texts.
cp -a /usr/lib/x86_64-linux-gnu/openmpi "$libdir/"
cp /usr/bin/orterun "$CARRY/root/usr/bin/mpirun"
cp /usr/bin/orted "$CARRY/root/usr/bin/orted"
cp -a /usr/share/openmpi "$CARRY/root/usr/share/"
# Every library these need that is neither glibc's, GCC's runtime, nor the GPU machine's torch/CUDA/NCCL.
needs() {
  LD_LIBRARY_PATH="$libdir/openmpi/lib:$site/torch/lib" ldd "$@" 2>/dev/null | awk '$3 ~ /^\// {print $3}' | sort -u
}
mapfile -t objects < <(find "$CARRY/libexec" "$CARRY/root/usr/bin" -type f; find "$libdir/openmpi" -name '*.so*' -type f)
needs "${objects[@]}" | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libutil.so.*|libresolv.so.*|ld-linux*) continue ;;
    libgcc_s.so.*|libstdc++.so.*) continue ;;
  esac
  case "$lib" in "$CARRY"/*|"$site"/*|/usr/local/cuda*) continue ;; esac
  cp -L "$lib" "$libdir/"
done
for t in dtsim dtsim_core_tests dtsim_nccl_tests dtsim_gpu_bench mpirun; do
  target='"$here/libexec/'"$t"'"'
  [ "$t" = mpirun ] && target='"$here/root/usr/bin/mpirun"'
  cat >"$CARRY/bin/$t" <<EOF
#!/usr/bin/env bash
# Runs $t with the packed libraries and the GPU machine's torch/CUDA/NCCL (scripts/gpu_build.sh).
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)"
: "\${DTSIM_GPU_LD_LIBRARY_PATH:?source \$here/env.sh first}"
export LD_LIBRARY_PATH="\$here/root/usr/lib/x86_64-linux-gnu/openmpi/lib:\$here/root/usr/lib/x86_64-linux-gnu:\$DTSIM_GPU_LD_LIBRARY_PATH"
export OPAL_PREFIX="\$here/root/usr" PATH="\$here/root/usr/bin:\$PATH"
exec $target "\$@"
EOF
  chmod +x "$CARRY/bin/$t"
done
cat >"$CARRY/env.sh" <<'EOF'
# Sourced on the GPU machine (scripts/gpu_check.sh does): the library path of its torch, CUDA and NCCL for the packed
# binaries (DTSIM_GPU_LD_LIBRARY_PATH; their wrappers in bin/ use it), and bin/ first on the PATH. DTSIM_GPU_PY names
# the Python whose torch to use (default python3).
DTSIM_GPU_CARRY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DTSIM_GPU_LD_LIBRARY_PATH="$("${DTSIM_GPU_PY:-python3}" - <<'PY'
import glob, importlib.util, os
torch = os.path.dirname(importlib.util.find_spec("torch").origin)
dirs = [os.path.join(torch, "lib")]
nvidia = importlib.util.find_spec("nvidia")
for root in (list(nvidia.submodule_search_locations) if nvidia else []):
    dirs += sorted(d for d in glob.glob(os.path.join(root, "*", "lib")) if os.path.isdir(d))
print(":".join(dirs))
PY
)"
export DTSIM_GPU_CARRY DTSIM_GPU_LD_LIBRARY_PATH
export PATH="$DTSIM_GPU_CARRY/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
{
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(git -C "$DTSIM_ROOT" rev-parse --short HEAD)$(git -C "$DTSIM_ROOT" diff --quiet HEAD || echo '+changes')"
  echo "torch $("$GPU_PY" -c 'import torch; print(torch.__version__)')"
} >"$CARRY/BUILD_INFO"

# 4. Smoke run here: the packed binaries load (this machine's CPU) and the packed mpirun is the one that runs.
(
  DTSIM_GPU_PY="$GPU_PY" source "$CARRY/env.sh"
  dtsim redistribute --mesh 2x4 --shape 5,10 --from "S(0),R" --to "R,S(1)" | grep -q "verdict: OK" \
    || { log "the packed dtsim failed its smoke run"; exit 1; }
  maps="$(mpirun -np 1 bash -c 'cat /proc/$PPID/maps')"
  grep -q "$CARRY/root/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_" <<<"$maps" \
    || { log "the packed mpirun did not load its own plugins (OPAL_PREFIX)"; exit 1; }
)
log "packed $(du -sh "$CARRY" | cut -f1) in $CARRY ($(cat "$CARRY/BUILD_INFO" | tr '\n' ' '))"
