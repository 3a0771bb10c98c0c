#!/usr/bin/env bash
# The torchtitan lane's venv (issue 59; docs/run.md, "torchtitan"): torch 2.15.0 and torchtitan 0.3.0, which needs
# torch >= 2.14. torch 2.15.0 exists only as a CUDA wheel (a few GB with its nvidia packages; it installs and imports
# on a CPU machine), on PyPI alone, so the install reads PyPI (PIP_CONFIG_FILE=/dev/null, past this machine's cap).
# The venv lives outside the checkout, in $DTSIM_TITAN_VENV (default ~/.cache/dtsim/titan-venv-2.15.0), so that every
# clone on the machine (CI's fresh one too) reuses it; it is made again only when it lacks those releases.
# Prints the venv's python on stdout; progress on stderr.
set -euo pipefail
TORCH=2.15.0
TITAN=0.3.0
VENV="${DTSIM_TITAN_VENV:-$HOME/.cache/dtsim/titan-venv-$TORCH}"
PY="$VENV/bin/python"
say() { echo "[titan venv] $*" >&2; }
has() {
  "$PY" - "$TORCH" "$TITAN" <<'PY' 2>/dev/null
import sys, importlib.metadata as m
sys.exit(not (m.version("torch").split("+")[0] == sys.argv[1] and m.version("torchtitan") == sys.argv[2]))
PY
}
if ! has; then
  say "creating $VENV: torch==$TORCH torchtitan==$TITAN from PyPI (a few GB the first time; minutes)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  PIP_CONFIG_FILE=/dev/null PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 \
    "$PY" -m pip install --progress-bar off -q "torch==$TORCH" "torchtitan==$TITAN" numpy >&2
  has || { say "torch==$TORCH and torchtitan==$TITAN did not install in $VENV"; exit 1; }
fi
say "$("$PY" -c 'import torch, torchtitan; print("torch", torch.__version__, "torchtitan", torchtitan.__version__)') in $VENV"
# dtsim itself, as a user installs it into their venv (docs/python.md): built against the venv's torch. The C++
# inputs (sources, headers, CMake files) and the torch release make a key; where the venv's dtsim was built from the
# same key, only its Python package is brought up to this checkout's, else `pip install --no-build-isolation` builds
# it again (in build-titan/ of the checkout, through ccache).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${DTSIM_TITAN_BUILD:-$ROOT/build-titan}"
export PIP_CONFIG_FILE=/dev/null PIP_CONSTRAINT=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
KEY="$(cd "$ROOT" && { echo "torch $TORCH"; git ls-files -s -- src include python/src simulator \
  CMakeLists.txt python/CMakeLists.txt '*.cmake' pyproject.toml | grep -E "\.(cc|h|cpp|hpp|txt|cmake|toml|in)$" || true;
  git diff HEAD -- src include python/src simulator CMakeLists.txt python/CMakeLists.txt pyproject.toml; } |
  sha256sum | cut -c1-16)"
MARK="$SITE/dtsim/.dtsim-build-key"
if [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$KEY" ] &&
   (cd / && "$PY" -c "import torch, dtsim._C" 2>/dev/null); then
  say "dtsim's extension in $VENV is built from these C++ sources (key $KEY): syncing its Python package"
  # _build_info.py is the build's (it names the torch the extension was built against): the venv keeps its own.
  (cd "$ROOT/python/dtsim" && find . \( -name '*.py' -o -name '*.pyi' -o -name py.typed \) \
     ! -name _build_info.py ! -path '*/__pycache__/*') | while read -r f; do
    mkdir -p "$SITE/dtsim/$(dirname "$f")"
    cp "$ROOT/python/dtsim/$f" "$SITE/dtsim/$f"
  done
  (cd / && "$PY" -c "import torch, dtsim._C, dtsim._build_info as b; assert b.TORCH_VERSION.startswith('$TORCH')") ||
    { say "the venv's dtsim does not load after the sync"; exit 1; }
else
  "$PY" -c "import scikit_build_core" 2>/dev/null || "$PY" -m pip install -q "scikit-build-core>=0.10" pytest >&2
  mkdir -p "$BUILD"
  say "pip install --no-build-isolation $ROOT (build tree $BUILD; the first build takes a while on 2 cores)"
  "$PY" -m pip install -v --no-build-isolation --no-deps -C build-dir="$BUILD" \
    -C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache -C cmake.define.DTSIM_BUILD_VIEWER=OFF \
    -C cmake.define.DTSIM_BUILD_BENCHMARKS=OFF -C cmake.define.DTSIM_WITH_MPI=OFF "$ROOT" >"$BUILD/pip.log" 2>&1 \
    </dev/null &
  pip_pid=$!
  trap 'kill "$pip_pid" 2>/dev/null || true' EXIT
  while kill -0 "$pip_pid" 2>/dev/null; do
    sleep 20
    step="$(grep -oE "\[[0-9]+/[0-9]+\]" "$BUILD/pip.log" | tail -1 || true)"
    [ -n "$step" ] && say "building $step"
  done
  wait "$pip_pid" || { grep -E "error|Error" "$BUILD/pip.log" | head -20 >&2; say "pip install failed: $BUILD/pip.log"; exit 1; }
  trap - EXIT
  (cd / && "$PY" -c "import torch, dtsim._C, dtsim._build_info as b; assert b.TORCH_VERSION.startswith('$TORCH'), b.TORCH_VERSION") ||
    { say "the venv's dtsim was not built against torch $TORCH"; exit 1; }
  echo "$KEY" > "$MARK"
fi
say "dtsim installed in $VENV, built against torch $TORCH"
echo "$PY"
