#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh, scripts/test.sh and scripts/bench.sh: installs what is missing
# (Debian packages, the project venv with torch==2.13.0), configures once and builds incrementally.
# Sourced, not run: it leaves DTSIM_ROOT, DTSIM_BUILD and DTSIM_PY set for the caller.
set -euo pipefail

DTSIM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DTSIM_BUILD="${DTSIM_BUILD:-$DTSIM_ROOT/build}"
DTSIM_PY="${DTSIM_PY:-$DTSIM_ROOT/.venv/bin/python}"  # override to use a venv elsewhere
TORCH_VERSION="2.13.0"
APT_PACKAGES=(cmake ninja-build ccache g++ python3-venv pkg-config nlohmann-json3-dev libgtest-dev
              libgmock-dev libboost-program-options-dev libbenchmark-dev libxxhash-dev)
APT_PACKAGES+=(libopenmpi-dev openmpi-bin)  # real ranks: the MPI backend and mpirun
APT_PACKAGES+=(clang-14 libclang-rt-14-dev llvm-14)  # sanitizer build + libFuzzer targets (build-asan, scripts/fuzz.sh)
# The NCCL backend compiles where the CUDA toolkit is (its runtime headers and library); NCCL itself comes from PyPI.
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
PIP_PACKAGES=("torch==$TORCH_VERSION" numpy pytest)
PIP_PACKAGES+=("accelerate==1.15.0")  # tests/run/scripts/accelerate_ddp.py: HuggingFace's launcher state, per rank
[ -f "$CUDA_HOME/include/cuda_runtime.h" ] && PIP_PACKAGES+=(nvidia-nccl-cu13)
# The viewer: Dear ImGui (Debian's libimgui.a ships its GLFW and OpenGL3 backends), GLFW, stb_image_write; headless
# screenshots and pixel tests run under xvfb-run (xauth) on Mesa's software OpenGL (llvmpipe, in libgl1-mesa-dri).
APT_PACKAGES+=(libimgui-dev libglfw3-dev libstb-dev libgl1-mesa-dri xvfb xauth)  # viewer
APT_PACKAGES+=(clang-format-14)  # scripts/format.sh and the ctest `format` check
APT_PACKAGES+=(time)  # scripts/bench.sh: wall time and peak RSS of command-line runs (/usr/bin/time, issue 11)

# ccache: most objects include the LibTorch precompiled header, which ccache refuses unless told that the PCH's
# defines and time macros may be trusted ("Could not use precompiled header" for 145 of 267 compiles without it).
# Paths below the checkout are hashed relative to it, so a fresh clone (CI's) reuses the objects another clone
# compiled.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$DTSIM_ROOT}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

log() { echo "[setup] $*" >&2; }

install_apt_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

install_venv() {
  if [ -x "$DTSIM_PY" ] && "$DTSIM_PY" - "${PIP_PACKAGES[@]}" <<'PY' 2>/dev/null; then return 0; fi
import sys, importlib.metadata as m
for spec in sys.argv[1:]:
    name, _, version = spec.partition("==")
    have = m.version(name)
    if version and have.split("+")[0] != version:
        sys.exit(1)
PY
  log "creating/updating the project venv .venv: ${PIP_PACKAGES[*]}"
  [ -x "$DTSIM_PY" ] || python3 -m venv "$DTSIM_ROOT/.venv"
  "$DTSIM_PY" -m pip install -q --disable-pip-version-check "${PIP_PACKAGES[@]}" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" >&2 || true
  "$DTSIM_PY" -c "import torch" || { log "torch did not install"; exit 1; }
}

# `import dtsim` in the venv: python/ goes on its path through a .pth file (what `pip install -e` does, without a
# second build: CMake builds the extension dtsim._C into python/dtsim/ with the rest, python/CMakeLists.txt).
install_python_package() {
  local site pth
  site="$("$DTSIM_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  pth="$site/dtsim.pth"
  if [ "$(cat "$pth" 2>/dev/null)" != "$DTSIM_ROOT/python" ]; then
    log "installing the dtsim Python package into the venv (editable: $pth)"
    printf '%s\n' "$DTSIM_ROOT/python" > "$pth"
  fi
}

configure_and_build() {
  if [ ! -f "$DTSIM_BUILD/build.ninja" ]; then
    local torch_prefix
    torch_prefix="$("$DTSIM_PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    log "configuring $DTSIM_BUILD"
    cmake -S "$DTSIM_ROOT" -B "$DTSIM_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DPython3_EXECUTABLE="$DTSIM_PY" >/dev/null
  fi
  cmake --build "$DTSIM_BUILD" -j "${DTSIM_JOBS:-2}" "$@"
}

# The sanitizer build (docs/reliability.md): clang-14 with AddressSanitizer + UndefinedBehaviorSanitizer (no
# recovery) and libFuzzer coverage instrumentation, -O1 with line tables, no benchmarks, in $DTSIM_ASAN_BUILD
# (build-asan). The same build serves the CI step (unit tests + corpus replays) and scripts/fuzz.sh.
DTSIM_ASAN_BUILD="${DTSIM_ASAN_BUILD:-$DTSIM_ROOT/build-asan}"
configure_and_build_asan() {
  if [ ! -f "$DTSIM_ASAN_BUILD/build.ninja" ]; then
    local torch_prefix
    torch_prefix="$("$DTSIM_PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
    log "configuring $DTSIM_ASAN_BUILD (clang-14, ASan + UBSan, libFuzzer)"
    CC=clang-14 CXX=clang++-14 cmake -S "$DTSIM_ROOT" -B "$DTSIM_ASAN_BUILD" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
      -DDTSIM_SANITIZE=ON -DDTSIM_BUILD_FUZZERS=ON -DDTSIM_BUILD_BENCHMARKS=OFF \
      -DDTSIM_WITH_MPI=OFF -DDTSIM_WITH_NCCL=OFF -DDTSIM_BUILD_VIEWER=OFF \
      -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DPython3_EXECUTABLE="$DTSIM_PY" >/dev/null
  fi
  cmake --build "$DTSIM_ASAN_BUILD" -j "${DTSIM_JOBS:-2}" "$@"
}

install_apt_packages
install_venv
install_python_package
